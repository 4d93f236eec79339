package pipeline

import (
	"fmt"
	"sort"

	"github.com/sdtool/sdtool/formats"
)

// TensorSummary is one row of a dry run: what happens to one tensor.
type TensorSummary struct {
	// Name is the output tensor name.
	Name string `json:"name"`
	// Shape is the output shape in PyTorch order.
	Shape []int64 `json:"shape"`
	// SourceType is the input tensor's type name, "" when there is no single source.
	SourceType string `json:"source_type,omitempty"`
	// Type is the output type name.
	Type string `json:"type"`
	// Elements is the number of elements.
	Elements int64 `json:"elements"`
	// SourceBytes is the input tensor's size, 0 when there is no single source.
	SourceBytes int64 `json:"source_bytes"`
	// Bytes is the output size.
	Bytes int64 `json:"bytes"`
	// BitsPerWeight is 8*Bytes/Elements (0 for empty tensors).
	BitsPerWeight float64 `json:"bits_per_weight"`
}

// TypeSummary totals the tensors of one output type.
type TypeSummary struct {
	// Type is the output type name.
	Type string `json:"type"`
	// Tensors is the number of tensors of this type.
	Tensors int `json:"tensors"`
	// Elements is their element count.
	Elements int64 `json:"elements"`
	// Bytes is their size.
	Bytes int64 `json:"bytes"`
}

// Summary describes a plan as data for `--dry-run` (a table or JSON).
type Summary struct {
	// Tensors has one row per output, in plan order.
	Tensors []TensorSummary `json:"tensors"`
	// ByType totals the outputs per output type, in type id order.
	ByType []TypeSummary `json:"by_type"`
	// Elements is the total element count.
	Elements int64 `json:"elements"`
	// SourceBytes totals the sizes of the outputs' sources.
	SourceBytes int64 `json:"source_bytes"`
	// Bytes is the total output data size (without header and padding).
	Bytes int64 `json:"bytes"`
	// SourceBitsPerWeight is 8*SourceBytes over the elements of outputs that have a source.
	SourceBitsPerWeight float64 `json:"source_bits_per_weight"`
	// BitsPerWeight is 8*Bytes/Elements.
	BitsPerWeight float64 `json:"bits_per_weight"`
}

func bpw(bytes, elements int64) float64 {
	if elements == 0 {
		return 0
	}
	return float64(bytes) * 8 / float64(elements)
}

// Summary computes the dry-run summary of the plan; it runs no producer.
func (p *Plan) Summary() (Summary, error) {
	var s Summary
	byType := map[formats.DType]*TypeSummary{}
	var srcElements int64
	for i := range p.Outputs {
		o := &p.Outputs[i]
		size, err := o.Bytes()
		if err != nil {
			return Summary{}, fmt.Errorf("tensor %q: %v", o.Name, err)
		}
		n := o.Elements()
		row := TensorSummary{
			Name:          o.Name,
			Shape:         append([]int64(nil), o.Shape...),
			Type:          o.Type.String(),
			Elements:      n,
			Bytes:         size,
			BitsPerWeight: bpw(size, n),
		}
		if o.Source != nil {
			row.SourceType = o.Source.Type.String()
			row.SourceBytes = o.Source.Size
			s.SourceBytes += o.Source.Size
			srcElements += n
		}
		s.Tensors = append(s.Tensors, row)
		s.Elements += n
		s.Bytes += size
		ts := byType[o.Type]
		if ts == nil {
			ts = &TypeSummary{Type: o.Type.String()}
			byType[o.Type] = ts
		}
		ts.Tensors++
		ts.Elements += n
		ts.Bytes += size
	}
	types := make([]formats.DType, 0, len(byType))
	for t := range byType {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	for _, t := range types {
		s.ByType = append(s.ByType, *byType[t])
	}
	s.BitsPerWeight = bpw(s.Bytes, s.Elements)
	s.SourceBitsPerWeight = bpw(s.SourceBytes, srcElements)
	return s, nil
}

package pipeline

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"text/tabwriter"

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
	// From names the source's type where SourceType does not say it
	// ("int8_convrot" for a ComfyUI module); "" otherwise.
	From string `json:"from,omitempty"`
	// Source is the input "FILE:TENSOR" the output comes from, "" when none.
	Source string `json:"source,omitempty"`
	// Note says why the output has its type or how it is made.
	Note string `json:"note,omitempty"`
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

	// params and count are Totals' parameters and the number of outputs,
	// set by summary whether or not it built Tensors.
	params int64
	count  int
}

func bpw(bytes, elements int64) float64 {
	if elements == 0 {
		return 0
	}
	return float64(bytes) * 8 / float64(elements)
}

// Summary computes the dry-run summary of the plan; it runs no producer.
func (p *Plan) Summary() (Summary, error) { return p.summary(true) }

// summary computes the summary, with its per-tensor rows only when rows is
// set: the line a run ends with needs the totals alone, and a row per
// tensor was the largest allocation of a header of 500k tensors.
func (p *Plan) summary(rows bool) (Summary, error) {
	var s Summary
	if rows {
		s.Tensors = make([]TensorSummary, 0, len(p.Outputs))
	}
	byType := map[formats.DType]*TypeSummary{}
	var srcElements int64
	for i := range p.Outputs {
		o := &p.Outputs[i]
		size, err := o.Bytes()
		if err != nil {
			return Summary{}, fmt.Errorf("tensor %q: %v", o.Name, err)
		}
		n := o.Elements()
		if o.Source != nil {
			// The source's count, not the output's: a packed 4-bit
			// ComfyUI weight stores two parameters per element.
			s.SourceBytes += o.Source.Size
			srcElements += o.Source.Elements()
		}
		if rows {
			row := TensorSummary{
				Name:          o.Name,
				Shape:         append([]int64(nil), o.Shape...),
				Type:          o.Type.String(),
				Elements:      n,
				Bytes:         size,
				BitsPerWeight: bpw(size, n),
				Source:        source(o),
				Note:          o.Note,
			}
			if o.Source != nil {
				row.SourceType = o.Source.Type.String()
				row.SourceBytes = o.Source.Size
			}
			if o.From != row.SourceType {
				row.From = o.From
			}
			s.Tensors = append(s.Tensors, row)
		}
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
	s.params, s.count = srcElements, len(p.Outputs)
	return s, nil
}

// Totals are what a summary's first line says: the bytes before and after,
// the parameters (elements of outputs with a source) and the output's bits
// per weight over those parameters.
func (s *Summary) Totals() (in, out, params int64, bitsPerWeight float64) {
	for _, t := range s.Tensors {
		if t.SourceType != "" {
			params += t.Elements
		}
	}
	return s.SourceBytes, s.Bytes, params, bpw(s.Bytes, params)
}

// source names the input an output comes from, "FILE:TENSOR".
func source(o *Output) string {
	if o.Source == nil {
		return ""
	}
	return o.Source.File + ":" + o.Source.Name
}

// showSources reports whether the table needs a SOURCE column: some output
// comes from a tensor of another name, or the outputs come from more than
// one file.
func (p *Plan) showSources() bool {
	file := ""
	for i := range p.Outputs {
		o := &p.Outputs[i]
		if o.Source == nil {
			continue
		}
		if o.Source.Name != o.Name || file != "" && o.Source.File != file {
			return true
		}
		file = o.Source.File
	}
	return false
}

// WriteTable prints the plan as --dry-run shows it for every writing
// command: one line per output tensor (name, source type, output type,
// shape, bytes before and after, where it comes from when that is not
// obvious, and the note), then WriteSummary.
func (p *Plan) WriteTable(w io.Writer) error {
	s, err := p.Summary()
	if err != nil {
		return err
	}
	sources := p.showSources()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "TENSOR\tFROM\tTO\tSHAPE\tBYTES IN\tBYTES OUT\tNOTE"
	if sources {
		head = "TENSOR\tFROM\tTO\tSHAPE\tBYTES IN\tBYTES OUT\tSOURCE\tNOTE"
	}
	fmt.Fprintln(tw, head)
	for i := range p.Outputs {
		o, row := &p.Outputs[i], &s.Tensors[i]
		shape := formats.FormatShape(o.Shape)
		if o.Source != nil && !slices.Equal(o.Source.Shape, o.Shape) {
			shape += fmt.Sprintf(" (was %s)", formats.FormatShape(o.Source.Shape))
		}
		from := o.From
		if from == "" {
			from = row.SourceType
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t", o.Name, from, row.Type, shape, row.SourceBytes, row.Bytes)
		if sources {
			fmt.Fprintf(tw, "%s\t", source(o))
		}
		fmt.Fprintln(tw, o.Note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return p.writeSummary(w, &s)
}

// WriteSummary prints what a run writes (or a dry run would): "PATH: file
// SIZE (N bytes); T tensors, P parameters: tensor data IN -> OUT (B bits
// per weight)", the tensors and bytes per output type, then the plan's
// Notes.
func (p *Plan) WriteSummary(w io.Writer) error {
	s, err := p.summary(false)
	if err != nil {
		return err
	}
	return p.writeSummary(w, &s)
}

func (p *Plan) writeSummary(w io.Writer, s *Summary) error {
	in, out, params := s.SourceBytes, s.Bytes, s.params
	b := bpw(out, params)
	// The file's size first, as the budget and the ladder say it (a split
	// output's shards each have a header of their own, so it has none
	// here); then the tensor data, which bits per weight count.
	name, file := p.Path, ""
	if paths, _, err := p.Shards(); err == nil && len(paths) > 1 {
		name = fmt.Sprintf("%s to %s", paths[0], filepath.Base(paths[len(paths)-1]))
	} else if size, err := p.FileSize(); err == nil {
		file = fmt.Sprintf(" file %s (%d bytes);", HumanBytes(size), size)
	}
	fmt.Fprintf(w, "%s:%s %s, %s: tensor data %s -> %s (%.2f bits per weight)\n",
		name, file, Count(s.count, "tensor", "tensors"), Count(int(params), "parameter", "parameters"), HumanBytes(in), HumanBytes(out), b)
	for _, t := range s.ByType {
		fmt.Fprintf(w, "  %-8s %13s  %s\n", t.Type, Count(t.Tensors, "tensor", "tensors"), HumanBytes(t.Bytes))
	}
	for _, n := range p.Notes {
		fmt.Fprintln(w, n)
	}
	return nil
}

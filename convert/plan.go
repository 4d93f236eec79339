package convert

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// Options selects the output types of a conversion.
type Options struct {
	// Type is --type; HasType false means none was given (keep storage types).
	Type    formats.DType
	HasType bool
	// Rules are the --tensor-type-rules, first match wins.
	Rules []pipeline.Rule[formats.DType]
	// Imatrix maps weight names to importance vectors (stored values of the
	// --imatrix files summed, as sd.cpp does); nil for none.
	Imatrix map[string][]float32
	// ConvertName, when set, renames tensors (--convert-name).
	ConvertName func(string) string
	// ImatrixKey maps a tensor's export name (before --convert-name) to its
	// imatrix key; sd.cpp always looks up converted names. nil is identity.
	ImatrixKey func(string) string
}

// Row describes one planned output tensor for --dry-run and logs.
type Row struct {
	// Name is the output name.
	Name string
	// Source is the input tensor name and File its file.
	Source, File string
	// From is the stored type and To the output type.
	From, To formats.DType
	// Shape is the output shape (PyTorch order).
	Shape []int64
	// BytesIn and BytesOut are the data sizes before and after.
	BytesIn, BytesOut int64
	// Note says why a requested type was not applied, or how the shape was folded.
	Note string
	// Imatrix reports that an importance vector from --imatrix was used.
	Imatrix bool
}

// Result is a built conversion plan.
type Result struct {
	// Plan is the pipeline plan, tensors in sd.cpp's order.
	Plan *pipeline.Plan
	// Rows describe each output tensor.
	Rows []Row
	// UnusedImatrix lists imatrix entries that matched no quantized tensor.
	UnusedImatrix []string
}

// Build plans the conversion of sources (from Load) to the output types
// sd.cpp would choose, with producers that give sd.cpp's bytes: quantized
// types always take ggml's weighted path, with the imatrix entry or a
// vector of ones.
func Build(sources []Source, opts Options) (*Result, error) {
	res := &Result{Plan: &pipeline.Plan{}}
	usedIm := map[string]bool{}
	for i := range sources {
		s := &sources[i]
		name := s.Name
		if opts.ConvertName != nil {
			name = opts.ConvertName(name)
		}
		d := Decide(name, s.Storage, s.RowLength(), s.Int8Tensorwise, opts.Type, opts.HasType, opts.Rules)
		row := Row{Name: name, Source: s.Tensor.Name, File: s.Tensor.File, From: s.Tensor.Type, To: d.Type,
			Shape: s.Shape, BytesIn: s.Tensor.Size, Note: joinNotes(s.Folded, d.Kept)}
		out := pipeline.Output{Name: name, Type: d.Type, Shape: s.Shape, Source: &s.Tensor}
		var weights []float32
		if d.Type.Quantized() {
			key := s.Name
			if opts.ImatrixKey != nil {
				key = opts.ImatrixKey(key)
			}
			weights = importance(opts.Imatrix[key], int(s.RowLength()))
			if _, ok := opts.Imatrix[key]; ok {
				row.Imatrix, usedIm[key] = true, true
			}
		}
		p, err := producer(s, d.Type, weights)
		if err != nil {
			return nil, err
		}
		out.Producer = p
		n, err := out.Bytes()
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w", s.Tensor.File, s.Tensor.Name, err)
		}
		row.BytesOut = n
		res.Plan.Outputs = append(res.Plan.Outputs, out)
		res.Rows = append(res.Rows, row)
	}
	for k := range opts.Imatrix {
		if !usedIm[k] {
			res.UnusedImatrix = append(res.UnusedImatrix, k)
		}
	}
	sort.Strings(res.UnusedImatrix)
	if err := res.Plan.Validate(); err != nil {
		return nil, err
	}
	return res, nil
}

func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// importance returns sd.cpp's vector for a row of n: the imatrix values
// truncated or padded with ones to n, or all ones when there are none.
func importance(v []float32, n int) []float32 {
	w := make([]float32, n)
	copy(w, v)
	for i := min(len(v), n); i < n; i++ {
		w[i] = 1
	}
	return w
}

// producer returns what fills the output of s in type to.
func producer(s *Source, to formats.DType, weights []float32) (pipeline.Producer, error) {
	from := s.Tensor.Type
	switch {
	case from == to:
		return pipeline.Copy(s.Model, s.Tensor), nil
	case from == formats.I64 && to == formats.I32:
		return &narrowI64{m: s.Model, t: s.Tensor}, nil
	}
	src := tensor.Plain(s.Model, s.Tensor)
	if err := src.Err(); err != nil {
		return nil, err
	}
	enc, err := quant.Encoder(to)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", s.Tensor.File, s.Tensor.Name, err)
	}
	return pipeline.Convert(src, to, pipeline.EncodeRows(to, enc.Quantize, weights)), nil
}

// narrowI64 stores I64 data as I32 with a truncating cast, as sd.cpp does.
type narrowI64 struct {
	m formats.Model
	t formats.Tensor
}

// Produce converts the requested elements (one element per row unit or a
// whole row of them) from the source.
func (p *narrowI64) Produce(_ context.Context, dst []byte, firstRow, nRows int64, s *tensor.Scratch) error {
	n := len(dst) / 4
	perRow := int64(n) / max(nRows, 1)
	src := s.Bytes(0, 8*n)
	if err := formats.ReadFull(p.m, &p.t, src, 8*firstRow*perRow); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(int32(binary.LittleEndian.Uint64(src[8*i:]))))
	}
	return nil
}

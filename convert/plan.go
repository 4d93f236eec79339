package convert

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// policy selects the output types of a conversion.
type policy struct {
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

// build adds the conversion of sources (from Load) to plan, with the output
// types sd.cpp would choose and producers that give sd.cpp's bytes:
// quantized types always take ggml's weighted path, with the imatrix entry
// or a vector of ones. It returns the imatrix entries no tensor used.
func build(plan *pipeline.Plan, sources []Source, pol policy) ([]string, error) {
	usedIm := map[string]bool{}
	plan.Outputs = slices.Grow(plan.Outputs, len(sources))
	for i := range sources {
		s := &sources[i]
		name := s.Name
		if pol.ConvertName != nil {
			name = pol.ConvertName(name)
		}
		d := Decide(name, s.Storage, s.RowLength(), s.Int8Tensorwise, pol.Type, pol.HasType, pol.Rules)
		if to, ok := pol.floatTarget(d); ok && d.Type.Quantized() && d.Type != to {
			// A float type asked for a quantized tensor that sd.cpp's policy
			// keeps (an embedding, a row the block does not fit): decoding it
			// loses nothing, and keeping it would defeat "back to f16".
			d.Kept = fmt.Sprintf("dequantized from %s (sd-cli keeps it: %s)", d.Type, d.Kept)
			d.Type = to
		}
		out := pipeline.Output{Name: name, Type: d.Type, Shape: s.Shape, Source: s.Tensor, Note: joinNotes(s.Folded, d.Kept)}
		var weights []float32
		if d.Type.Quantized() {
			key := s.Name
			if pol.ImatrixKey != nil {
				key = pol.ImatrixKey(key)
			}
			weights = importance(pol.Imatrix[key], int(s.RowLength()))
			if _, ok := pol.Imatrix[key]; ok {
				out.Note, usedIm[key] = joinNotes("imatrix", out.Note), true
			}
		}
		size, err := out.Bytes()
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w", s.Tensor.File, s.Tensor.Name, err)
		}
		if size > 0 || s.Tensor.Type != d.Type {
			// An empty copy has nothing to produce: no producer per tensor
			// for headers of many empty tensors.
			if out.Producer, err = producer(s, d.Type, weights); err != nil {
				return nil, err
			}
		}
		plan.Outputs = append(plan.Outputs, out)
	}
	var unused []string
	for k := range pol.Imatrix {
		if !usedIm[k] {
			unused = append(unused, k)
		}
	}
	sort.Strings(unused)
	return unused, nil
}

// floatTarget returns the type d's tensor was asked to become (its rule's,
// else --type) when that is a float type (f32, f16, bf16).
func (pol policy) floatTarget(d Decision) (formats.DType, bool) {
	to, ok := pol.Type, pol.HasType
	if d.Rule >= 0 {
		to, ok = pol.Rules[d.Rule].Value, true
	}
	return to, ok && (to == formats.F32 || to == formats.F16 || to == formats.BF16)
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
		return pipeline.Copy(s.Model, *s.Tensor), nil
	case from == formats.I64 && to == formats.I32:
		return &narrowI64{m: s.Model, t: *s.Tensor}, nil
	}
	src := tensor.Plain(s.Model, *s.Tensor)
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

package convert

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quantize/dequant"
)

// dequantized is a view of a model in which ComfyUI quantized modules
// (int8_tensorwise with or without convrot, FP8 with weight_scale) appear as
// plain F32 weights, decoded exactly on read, and their scales and markers
// are gone. --dequantize converts through it; without the flag convert keeps
// sd-cli's behaviour (int8 weights kept, FP8 widened to F16, markers skipped).
type dequantized struct {
	formats.Model
	tensors []formats.Tensor
	sources map[string]*dequant.Source
}

// dequantizeModules returns m itself when it has no ComfyUI quantized
// modules, and the dequantized view otherwise.
func dequantizeModules(m formats.Model) (formats.Model, int, error) {
	d, err := dequant.Open(m)
	if err != nil {
		return nil, 0, err
	}
	modules := 0
	v := &dequantized{Model: m, sources: map[string]*dequant.Source{}}
	for _, s := range d.Sources {
		t := s.Tensor
		if s.Module != nil {
			if s.Module.Unsupported {
				return nil, 0, fmt.Errorf("%s: module %q: %s cannot be dequantized", t.File, s.Module.Name, s.TypeName())
			}
			modules++
			t.Type, t.Size = formats.F32, 4*t.Elements()
			v.sources[t.Name] = s
		}
		v.tensors = append(v.tensors, t)
	}
	if modules == 0 {
		return m, 0, nil
	}
	return v, modules, nil
}

// Tensors lists the view's tensors: module weights as F32, aux tensors left out.
func (v *dequantized) Tensors() []formats.Tensor { return v.tensors }

// ReadTensorAt reads raw bytes, or decodes a module weight to F32 bytes.
func (v *dequantized) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	s, ok := v.sources[t.Name]
	if !ok {
		return v.Model.ReadTensorAt(t, p, off)
	}
	if off%4 != 0 || len(p)%4 != 0 {
		return 0, fmt.Errorf("%s: tensor %q: dequantized reads must be whole floats", t.File, t.Name)
	}
	f := make([]float32, len(p)/4)
	if err := s.Read(f, off/4, &scratch{}); err != nil {
		return 0, err
	}
	for i, x := range f {
		binary.LittleEndian.PutUint32(p[4*i:], math.Float32bits(x))
	}
	return len(p), nil
}

// scratch is a minimal dequant.Scratch for one read.
type scratch struct {
	b map[int][]byte
	f map[int][]float32
}

func (s *scratch) Bytes(slot, n int) []byte {
	if s.b == nil {
		s.b = map[int][]byte{}
	}
	if cap(s.b[slot]) < n {
		s.b[slot] = make([]byte, n)
	}
	return s.b[slot][:n]
}

func (s *scratch) Float32s(slot, n int) []float32 {
	if s.f == nil {
		s.f = map[int][]float32{}
	}
	if cap(s.f[slot]) < n {
		s.f[slot] = make([]float32, n)
	}
	return s.f[slot][:n]
}

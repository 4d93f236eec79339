package tensor

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sdtool/sdtool/formats"
)

// dequantized is a model in which ComfyUI quantized modules
// (int8_tensorwise with or without convrot, FP8 with weight_scale) appear as
// plain F32 weights, decoded exactly on read, and their scales and markers
// are gone.
type dequantized struct {
	formats.Model
	tensors []formats.Tensor
	sources map[string]*Source
}

// Dequantized returns m itself when it has no ComfyUI quantized modules,
// and otherwise a model that lists each module's weight as an F32 tensor,
// decoded exactly on read, without the module's scales and markers; n is
// the number of modules. A module whose format cannot be decoded is an
// error. `sdtool convert --dequantize` reads its inputs through it.
func Dequantized(m formats.Model) (_ formats.Model, n int, err error) {
	d, err := NewView(m)
	if err != nil {
		return nil, 0, err
	}
	modules := 0
	v := &dequantized{Model: m, sources: map[string]*Source{}}
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
	if err := s.Read(f, off/4, &Scratch{}); err != nil {
		return 0, err
	}
	for i, x := range f {
		binary.LittleEndian.PutUint32(p[4*i:], math.Float32bits(x))
	}
	return len(p), nil
}

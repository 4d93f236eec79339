package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/tensor"
)

// weightSet holds a model's weights in one ggml backend buffer.
type weightSet struct {
	ctx    *native.Context
	buf    *native.Buffer
	byName map[string]native.Tensor
	types  map[string]formats.DType
	// w8a8 maps the weights of INT8 modules to their rotation group (0: none).
	w8a8 map[string]int
	// actLevels maps the W8A8 weights whose activations take other codes
	// than ±127 to their range (7: convrot_w4a4's int4 activations).
	actLevels map[string]int
}

func (w *weightSet) get(name string) (native.Tensor, bool) {
	t, ok := w.byName[name]
	return t, ok
}

// free releases the weights.
func (w *weightSet) free() {
	if w == nil {
		return
	}
	w.buf.Free()
	w.ctx.Free()
}

// ggmlDims turns a PyTorch shape into ggml dims (innermost first), a
// Conv3d kernel's folded to four (foldDims).
func ggmlDims(shape []int64) []int64 {
	if len(shape) == 0 {
		return []int64{1}
	}
	shape = foldDims(shape)
	ne := make([]int64, len(shape))
	for i, d := range shape {
		ne[len(shape)-1-i] = d
	}
	return ne
}

// loadWeights creates ggml tensors for specs on the backend and streams
// their data in: one backend buffer holds the weights, and Go memory holds
// only one chunk of one tensor at a time.
func loadWeights(be *native.Backend, path string, specs []weightSpec) (*weightSet, error) {
	ctx, err := native.NewContext(len(specs)+1, 0)
	if err != nil {
		return nil, err
	}
	ws := &weightSet{ctx: ctx, byName: map[string]native.Tensor{}, types: map[string]formats.DType{}}
	for i := range specs {
		s := &specs[i]
		t, err := ctx.NewTensor(s.Type, ggmlDims(foldDims(s.Shape))...)
		if err != nil {
			ctx.Free()
			return nil, fmt.Errorf("%s: tensor %q: %w", s.model.Path(), s.src.Name, err)
		}
		t.SetName(s.Name)
		ws.byName[s.Name] = t
		ws.types[s.Name] = s.Type
		if s.w8a8 {
			if ws.w8a8 == nil {
				ws.w8a8 = map[string]int{}
			}
			ws.w8a8[s.Name] = s.group
			if s.actLevels != 0 {
				if ws.actLevels == nil {
					ws.actLevels = map[string]int{}
				}
				ws.actLevels[s.Name] = s.actLevels
			}
		}
	}
	if ws.buf, err = be.AllocContext(ctx); err != nil {
		ctx.Free()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	scratch := &tensor.Scratch{}
	for i := range specs {
		s := &specs[i]
		t := ws.byName[s.Name]
		err := s.stream(scratch, func(data []byte, off int64) error {
			if err := t.SetDataAt(data, off); err != nil {
				return fmt.Errorf("%s: tensor %q: %w", s.model.Path(), s.src.Name, err)
			}
			return nil
		})
		if err != nil {
			ws.free()
			return nil, err
		}
	}
	return ws, nil
}

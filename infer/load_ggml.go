package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// weightSet holds a model's weights: their ggml descriptors, and their
// data resident or streamed within a memory budget (stream.go).
type weightSet struct {
	ctx *native.Context
	p   *pager
	// buf, when not nil, is a buffer the caller placed every weight in
	// (tests that fill weights by hand, without a pager); free releases it.
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
	if w.p != nil {
		w.p.free()
	}
	w.buf.Free()
	w.ctx.Free()
}

// run computes an allocated graph whose compute buffer is compute bytes,
// streaming the weights that are not resident.
func (w *weightSet) run(be *native.Backend, gr *native.Graph, compute int64) error {
	if w.p == nil { // weights placed by the caller (tests)
		return be.Compute(gr)
	}
	return w.p.run(gr, compute)
}

// prepare readies a built graph for allocation, in block order when
// reorder is set (pager.prepare).
func (w *weightSet) prepare(gr *native.Graph, reorder bool) error {
	if w.p == nil {
		return nil
	}
	return w.p.prepare(gr, reorder)
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

// loadWeights creates ggml tensors for specs on the backend and loads
// their data, all of it resident.
func loadWeights(be *native.Backend, path string, specs []weightSpec) (*weightSet, error) {
	return newWeightSet(be, path, specs, 0)
}

// newWeightSet creates ggml tensors for specs on the backend and hands
// their data to a pager with the budget (bytes, 0: none): loaded now when
// it fits, else read as graphs need it. Go memory holds only one chunk of
// one tensor at a time.
func newWeightSet(be *native.Backend, path string, specs []weightSpec, budget int64) (*weightSet, error) {
	ctx, err := native.NewContext(len(specs)+1, 0)
	if err != nil {
		return nil, err
	}
	ws := &weightSet{ctx: ctx, byName: map[string]native.Tensor{}, types: map[string]formats.DType{}}
	tensors := make([]native.Tensor, len(specs))
	for i := range specs {
		s := &specs[i]
		t, err := ctx.NewTensor(s.Type, ggmlDims(foldDims(s.Shape))...)
		if err != nil {
			ctx.Free()
			return nil, fmt.Errorf("%s: tensor %q: %w", s.model.Path(), s.src.Name, err)
		}
		t.SetName(s.Name)
		tensors[i] = t
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
	if ws.p, err = newPager(be, specs, tensors, budget); err != nil {
		ctx.Free()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := ws.p.start(); err != nil {
		ws.free()
		if _, ok := err.(*BudgetError); ok {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, err
	}
	return ws, nil
}

package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// WeightSet holds a model's weights: their ggml descriptors, and their
// data resident or streamed within a memory budget (stream.go).
type WeightSet struct {
	// Ctx holds the weights' ggml descriptors.
	Ctx *native.Context
	// Pager streams the weights within the memory budget (nil when Buf holds them).
	Pager *pager
	// Buf, when not nil, is a buffer the caller placed every weight in
	// (tests that fill weights by hand, without a pager); free releases it.
	Buf *native.Buffer
	// ByName and Types are each weight's descriptor and the type ggml holds it in.
	ByName map[string]native.Tensor
	Types  map[string]formats.DType
	// W8A8 maps the weights of INT8 modules to their rotation group (0: none).
	W8A8 map[string]int
	// actLevels maps the W8A8 weights whose activations take other codes
	// than ±127 to their range (7: convrot_w4a4's int4 activations).
	actLevels map[string]int
}

func (w *WeightSet) get(name string) (native.Tensor, bool) {
	t, ok := w.ByName[name]
	return t, ok
}

// Free releases the weights.
func (w *WeightSet) Free() {
	if w == nil {
		return
	}
	if w.Pager != nil {
		w.Pager.free()
	}
	w.Buf.Free()
	w.Ctx.Free()
}

// run computes an allocated graph whose compute buffer is compute bytes,
// streaming the weights that are not resident.
func (w *WeightSet) run(be *native.Backend, gr *native.Graph, compute int64) error {
	if w.Pager == nil { // weights placed by the caller (tests)
		return be.Compute(gr)
	}
	return w.Pager.run(gr, compute)
}

// prepare readies a built graph for allocation, in block order when
// reorder is set (pager.prepare).
func (w *WeightSet) prepare(gr *native.Graph, reorder bool) error {
	if w.Pager == nil {
		return nil
	}
	return w.Pager.prepare(gr, reorder)
}

// GgmlDims turns a PyTorch shape into ggml dims (innermost first), a
// Conv3d kernel's folded to four (foldDims).
func GgmlDims(shape []int64) []int64 {
	if len(shape) == 0 {
		return []int64{1}
	}
	shape = FoldDims(shape)
	ne := make([]int64, len(shape))
	for i, d := range shape {
		ne[len(shape)-1-i] = d
	}
	return ne
}

// LoadWeights creates ggml tensors for specs on the backend and loads
// their data, all of it resident.
func LoadWeights(be *native.Backend, path string, specs []WeightSpec) (*WeightSet, error) {
	return newWeightSet(be, path, specs, 0)
}

// newWeightSet creates ggml tensors for specs on the backend and hands
// their data to a pager with the budget (bytes, 0: none): loaded now when
// it fits, else read as graphs need it. Go memory holds only one chunk of
// one tensor at a time.
func newWeightSet(be *native.Backend, path string, specs []WeightSpec, budget int64) (*WeightSet, error) {
	ctx, err := native.NewContext(len(specs)+1, 0)
	if err != nil {
		return nil, err
	}
	ws := &WeightSet{Ctx: ctx, ByName: map[string]native.Tensor{}, Types: map[string]formats.DType{}}
	tensors := make([]native.Tensor, len(specs))
	for i := range specs {
		s := &specs[i]
		t, err := ctx.NewTensor(s.Type, GgmlDims(FoldDims(s.Shape))...)
		if err != nil {
			ctx.Free()
			return nil, fmt.Errorf("%s: tensor %q: %w", s.model.Path(), s.Src.Name, err)
		}
		t.SetName(s.Name)
		tensors[i] = t
		ws.ByName[s.Name] = t
		ws.Types[s.Name] = s.Type
		if s.w8a8 {
			if ws.W8A8 == nil {
				ws.W8A8 = map[string]int{}
			}
			ws.W8A8[s.Name] = s.group
			if s.actLevels != 0 {
				if ws.actLevels == nil {
					ws.actLevels = map[string]int{}
				}
				ws.actLevels[s.Name] = s.actLevels
			}
		}
	}
	if ws.Pager, err = newPager(be, specs, tensors, budget); err != nil {
		ctx.Free()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := ws.Pager.start(); err != nil {
		ws.Free()
		if _, ok := err.(*BudgetError); ok {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, err
	}
	return ws, nil
}

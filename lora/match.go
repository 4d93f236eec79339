package lora

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Use is one adapter to apply and its strength (the multiplier of
// "<lora:NAME:STRENGTH>").
type Use struct {
	Adapter  *Adapter
	Strength float64
}

// Plan is the result of matching adapters to a base: for every base tensor
// an adapter changes, the changes, and every adapter tensor that changes
// nothing.
type Plan struct {
	// Base is the model matched against.
	Base *Base
	// Uses are the adapters, in the order their changes are applied.
	Uses []Use
	// Targets lists the changed base tensors in the base's order.
	Targets []*Target
	// Unmatched lists the adapter modules and tensors that change nothing:
	// no base tensor is named like them, their kind cannot be applied, or
	// they are not adapter tensors at all. The command refuses a plan with
	// any unless told to allow them.
	Unmatched []Unmatched

	byName map[string]*Target
}

// Unmatched is an adapter module (or tensor) that changes no base tensor.
type Unmatched struct {
	// Adapter is the adapter's file.
	Adapter string
	// Module is the module name ("" for a tensor that is no adapter tensor).
	Module string
	// Keys lists the tensors.
	Keys []string
	// Reason says why it changes nothing.
	Reason string
}

// Target is one base tensor and the changes made to it.
type Target struct {
	// Name is the tensor's name as stored in the base.
	Name string
	// Shape is its shape.
	Shape []int64
	// Rows is the first dimension (1 for a scalar): the rows the changes
	// are given in.
	Rows int64
	// RowElems is the number of elements in one row.
	RowElems int64
	// Changes are applied in order (the order of Plan.Uses).
	Changes []Change

	plan    *Plan
	mu      sync.Mutex
	kernels []*kernel
}

// Change says that rows [TargetRow, TargetRow+Rows) of a target gain
// strength·scale times rows [LayerRow, LayerRow+Rows) of a layer's delta.
// A layer covers a target whole, or one part of a fused target (a
// diffusers to_k inside a BFL qkv), or a target is one part of a fused
// layer.
type Change struct {
	// Use is the index of the adapter in Plan.Uses.
	Use int
	// Layer is the adapter layer.
	Layer *Layer
	// TargetRow, LayerRow and Rows place the rows.
	TargetRow, LayerRow, Rows int64
}

// ShapeError is an adapter layer whose delta does not fit the base tensor
// its name matches.
type ShapeError struct {
	// Adapter is the adapter's file.
	Adapter string
	// Keys are the layer's tensors.
	Keys []string
	// Layer describes the delta's shape ("rows 9216 x [3072]").
	Layer string
	// Base is the base tensor's name and Shape its shape.
	Base  string
	Shape []int64
	// Detail says what does not fit.
	Detail string
}

// Error names the adapter key, the base tensor and both shapes.
func (e *ShapeError) Error() string {
	return fmt.Sprintf("%s: %s (%s) does not fit base tensor %q %v: %s", e.Adapter, strings.Join(e.Keys, ", "), e.Layer, e.Base, e.Shape, e.Detail)
}

// Match matches the adapters to the base. Shape mismatches and two layers
// of one adapter changing the same rows are errors (all of them are
// reported, joined); names that match nothing are listed in the plan.
func (b *Base) Match(uses ...Use) (*Plan, error) {
	p := &Plan{Base: b, Uses: uses, byName: map[string]*Target{}}
	targets := map[int]*Target{}
	var errs []error
	for ui, u := range uses {
		a := u.Adapter
		for _, r := range a.Refused {
			p.Unmatched = append(p.Unmatched, Unmatched{Adapter: a.Path, Module: r.Module, Keys: r.Keys, Reason: "refused: " + r.Reason})
		}
		if len(a.Unknown) > 0 {
			p.Unmatched = append(p.Unmatched, Unmatched{Adapter: a.Path, Keys: a.Unknown, Reason: "not an adapter tensor (no known suffix, or no factors to go with it)"})
		}
		byGroup := map[string]map[int]*Layer{}
		var order []string
		for _, l := range a.Layers {
			h, err := b.resolve(l)
			if err != nil {
				p.Unmatched = append(p.Unmatched, Unmatched{Adapter: a.Path, Module: l.Module, Keys: l.Keys, Reason: err.Error()})
				continue
			}
			parts := byGroup[h.group]
			if parts == nil {
				parts = map[int]*Layer{}
				byGroup[h.group] = parts
				order = append(order, h.group)
			}
			if prev := parts[h.part]; prev != nil {
				errs = append(errs, fmt.Errorf("%s: modules %q and %q both change %s", a.Path, prev.Module, l.Module, b.describe(h)))
				continue
			}
			parts[h.part] = l
		}
		for _, g := range order {
			changes, err := b.layout(a, g, byGroup[g])
			if err != nil {
				errs = append(errs, err...)
				continue
			}
			for _, c := range changes {
				t := targets[c.base]
				if t == nil {
					bt := b.tensors[c.base]
					t = &Target{Name: bt.name, Shape: bt.shape, plan: p}
					t.Rows, t.RowElems = 1, 1
					if len(bt.shape) > 0 {
						t.Rows, t.RowElems = bt.shape[0], prod(bt.shape[1:])
					}
					targets[c.base] = t
				}
				c.Change.Use = ui
				t.Changes = append(t.Changes, c.Change)
			}
		}
	}
	idx := make([]int, 0, len(targets))
	for i := range targets {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		p.Targets = append(p.Targets, targets[i])
		p.byName[targets[i].Name] = targets[i]
	}
	if len(errs) > 0 {
		return p, errors.Join(errs...)
	}
	return p, nil
}

// Target returns the changes of the base tensor called name, or nil when no
// adapter changes it.
func (p *Plan) Target(name string) *Target { return p.byName[name] }

func (b *Base) describe(h hit) string {
	if parts := b.groups[h.group]; h.part < len(parts) && parts[h.part] >= 0 {
		return fmt.Sprintf("base tensor %q", b.tensors[parts[h.part]].name)
	}
	return fmt.Sprintf("part %d of %q", h.part, h.group)
}

// placed is a change on one base tensor, by index.
type placed struct {
	base int
	Change
}

// layout places an adapter's layers on one base group. The rows of the
// group are the rows of its parts one after another; the base may store
// them as one fused tensor or as one tensor per part, and the adapter may
// have one layer for the whole or one per part. The layers' rows are laid
// out on the group's rows and cut where the base's tensors begin and end.
func (b *Base) layout(a *Adapter, g string, layers map[int]*Layer) ([]placed, []error) {
	parts := b.groups[g]
	var baseOff []int64 // offset of each base part in the group's rows
	var total int64
	for _, i := range parts {
		baseOff = append(baseOff, total)
		if i >= 0 {
			total += b.tensors[i].rowsOf()
		}
	}
	var errs []error
	fail := func(l *Layer, base int, format string, args ...any) {
		name, shape := g, []int64(nil)
		if base >= 0 {
			name, shape = b.tensors[base].name, b.tensors[base].shape
		}
		errs = append(errs, &ShapeError{Adapter: a.Path, Keys: l.Keys, Layer: l.describe(), Base: name, Shape: shape, Detail: fmt.Sprintf(format, args...)})
	}
	for k, i := range parts {
		if i < 0 {
			return nil, []error{fmt.Errorf("%s: base has parts of %q but not part %d", a.Path, g, k)}
		}
	}
	whole := parts[0]
	fused := b.fusedShape(g, whole)
	// Where each layer's rows start in the group's rows.
	start := map[int]int64{}
	var idx []int
	for k := range layers {
		idx = append(idx, k)
	}
	sort.Ints(idx)
	switch {
	case len(layers) == 1 && idx[0] == 0 && layers[0].Rows == total && !qPart(layers[0].Module, g):
		// One layer for the whole group (a fused layer on split parts too).
		start[0] = 0
	case len(parts) > 1:
		// Split base: layer k is base part k.
		for _, k := range idx {
			if k >= len(parts) {
				fail(layers[k], whole, "the base has %d parts, not a part %d", len(parts), k)
				continue
			}
			if r := b.tensors[parts[k]].rowsOf(); layers[k].Rows != r {
				fail(layers[k], parts[k], "%d rows, the base part has %d", layers[k].Rows, r)
				continue
			}
			start[k] = baseOff[k]
		}
	case len(layers) == 1 && idx[0] == 0 && !qPart(layers[0].Module, g):
		fail(layers[0], whole, "%d rows, the tensor has %d", layers[0].Rows, total)
	default:
		// Fused base, one layer per part, any subset of the parts: each part
		// has its exact rows at its own offset (fusedPartRows).
		for _, k := range idx {
			want := fusedPartRows(fused, k)
			if want <= 0 {
				fail(layers[k], whole, "the fused tensor has no part %d", k)
				continue
			}
			if layers[k].Rows != want {
				fail(layers[k], whole, "part %d has %d rows, the fused tensor's part %d has %d", k, layers[k].Rows, k, want)
				continue
			}
			start[k] = fusedPartStart(fused, k)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	var out []placed
	for _, k := range idx {
		l := layers[k]
		s, ok := start[k]
		if !ok {
			continue
		}
		for pk, bi := range parts {
			lo, hi := max(s, baseOff[pk]), min(s+l.Rows, baseOff[pk]+b.tensors[bi].rowsOf())
			if lo >= hi {
				continue
			}
			if err := l.fits(b.tensors[bi]); err != "" {
				fail(l, bi, "%s", err)
				continue
			}
			out = append(out, placed{base: bi, Change: Change{Layer: l, TargetRow: lo - baseOff[pk], LayerRow: lo - s, Rows: hi - lo}})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// The fused tensors sd.cpp builds at load time are attention projections
// q, k, v (parts 0-2), square in the model's width, followed in Flux's
// single blocks by the MLP input (part 3, the rest of the rows): BFL and
// SD3 qkv [3w, w], Flux linear1 [3w+m, w]; a 1-D bias is cut as its weight
// (fusedShape), and one without a weight in thirds.
// fusedPartRows returns the rows of part k of a fused tensor of the given
// shape, 0 when it has no such part.
func fusedPartRows(shape []int64, k int) int64 {
	if len(shape) == 0 || k < 0 || k > 3 {
		return 0
	}
	total, w := shape[0], int64(1)
	if len(shape) > 1 {
		w = prod(shape[1:])
	}
	if len(shape) == 1 || total < 3*w {
		if k < 3 && total%3 == 0 {
			return total / 3
		}
		return 0
	}
	if k < 3 {
		return w
	}
	return total - 3*w
}

// qPart reports whether an adapter module names a q projection alone
// (diffusers "to_q", "add_q_proj", PEFT "q_proj") while the base group g it
// changes is a fused one (sd.cpp's qkv or Flux's linear1): the layer is
// then the group's first part, never the whole tensor however many rows it
// has.
func qPart(module, g string) bool {
	stem := strings.TrimSuffix(strings.TrimSuffix(g, ".weight"), ".bias")
	if !strings.HasSuffix(stem, ".qkv") && !strings.HasSuffix(stem, ".linear1") {
		return false
	}
	for _, q := range []string{"to_q", "add_q_proj", "q_proj"} {
		if strings.HasSuffix(module, "."+q) || strings.HasSuffix(module, "_"+q) {
			return true
		}
	}
	return false
}

// fusedShape returns the shape the parts of fused group g are cut by: the
// tensor's own, or for a 1-D bias its rows with its weight's width.
func (b *Base) fusedShape(g string, whole int) []int64 {
	shape := b.tensors[whole].shape
	if stem, ok := strings.CutSuffix(g, ".bias"); ok && len(shape) == 1 {
		if w, ok := b.groups[stem+".weight"]; ok && len(w) > 0 && w[0] >= 0 && len(b.tensors[w[0]].shape) > 1 {
			return append([]int64{shape[0]}, b.tensors[w[0]].shape[1:]...)
		}
	}
	return shape
}

// fusedPartStart returns the first row of part k of a fused tensor.
func fusedPartStart(shape []int64, k int) int64 {
	var off int64
	for j := range k {
		off += fusedPartRows(shape, j)
	}
	return off
}

// rowsOf returns the tensor's first dimension (1 for a scalar).
func (t *baseTensor) rowsOf() int64 {
	if len(t.shape) == 0 {
		return 1
	}
	return t.shape[0]
}

// fits checks that a layer's rows are as long as the base tensor's and, when
// the layer's factors give its rows a shape, shaped alike (trailing 1s
// aside: a 1x1 convolution fits a linear layer). Rows stored flat (a
// convolution's down factor saved as [rank, in·kh·kw]) fit by their
// length, as sd.cpp and ComfyUI reshape them.
func (l *Layer) fits(t baseTensor) string {
	var inner []int64
	if len(t.shape) > 0 {
		inner = t.shape[1:]
	}
	if n := prod(inner); n != l.Cols {
		return fmt.Sprintf("rows of %d elements, the tensor's rows have %d", l.Cols, n)
	}
	if len(l.Inner) > 1 && !sameSqueezed(l.Inner, inner) {
		return fmt.Sprintf("rows shaped %v, the tensor's rows are %v", l.Inner, inner)
	}
	return ""
}

func sameSqueezed(a, b []int64) bool {
	for len(a) > 0 && a[len(a)-1] == 1 {
		a = a[:len(a)-1]
	}
	for len(b) > 0 && b[len(b)-1] == 1 {
		b = b[:len(b)-1]
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// describe gives the delta's shape for errors ("9216 rows x [3072]").
func (l *Layer) describe() string {
	if l.Inner != nil {
		return fmt.Sprintf("%s, %d rows x %v", l.Kind, l.Rows, l.Inner)
	}
	return fmt.Sprintf("%s, %d rows x %d", l.Kind, l.Rows, l.Cols)
}

package lora

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// Baked is a base model with a plan's adapters baked in, computed as it is
// read: it lists the base's tensors unchanged (names, types, shapes, files),
// and a changed tensor's values are the base's, decoded to float32, plus the
// deltas. A Source of it (package tensor) reads those float32 sums as they
// are (Baked is a tensor.Computed), so a writer that converts them to
// another type rounds them once; ReadTensorAt encodes them back to the
// tensor's own type, so that copying a tensor "as stored" copies the baked
// values. Any writer that reads a model through package tensor (quantize,
// a merge plan) therefore writes the baked model, streamed: only the rows
// being read and the factors of the layers changing them are in memory.
// When a tensor has been read whole, its factors are released; a second
// pass over it (a statistics pass, then the writing pass) reads them again.
type Baked struct {
	formats.Model
	plan    *Plan
	changed map[string]*bakedTensor
}

// bakedTensor is one changed tensor: its base Source and the target.
type bakedTensor struct {
	target *Target
	src    *tensor.Source
	unit   int64 // elements of a stored row (the innermost stored dim): the encoding unit
	// read counts the elements handed out since the tensor was last read
	// whole: when it reaches the tensor's size the factors are released.
	read atomic.Int64

	encOnce sync.Once
	enc     quant.Codec
	encErr  error
}

// bakeScratch holds a reader's buffers.
type bakeScratch struct {
	s    tensor.Scratch
	wide []float32
}

var bakePool = sync.Pool{New: func() any { return new(bakeScratch) }}

// Bake returns base with the adapters of p baked in. p must have been
// matched against base's tensors (NewBase of base.Tensors(), with their
// logical shapes): every target must be a float tensor of base (any float
// or ggml block type) with the target's number of elements. base should
// have no ComfyUI quantized modules (read it through tensor.Dequantized
// first). Closing the result closes base.
func Bake(base formats.Model, p *Plan) (*Baked, error) {
	v, err := tensor.NewView(base)
	if err != nil {
		return nil, err
	}
	b := &Baked{Model: base, plan: p, changed: map[string]*bakedTensor{}}
	for _, tg := range p.Targets {
		s, ok := v.Lookup(tg.Name)
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: the adapters change tensor %q, which the base does not have", base.Path(), tg.Name)
		case s.Module != nil:
			return nil, fmt.Errorf("%s: tensor %q is a ComfyUI %s module: dequantize the base before baking", base.Path(), tg.Name, s.TypeName())
		case !s.Float():
			return nil, fmt.Errorf("%s: tensor %q is %s: adapters change float weights only", base.Path(), tg.Name, s.TypeName())
		case s.Err() != nil:
			return nil, s.Err()
		case s.Elements() != tg.Rows*tg.RowElems:
			return nil, fmt.Errorf("%s: tensor %q has %d elements, the adapters change %d", base.Path(), tg.Name, s.Elements(), tg.Rows*tg.RowElems)
		}
		unit := int64(1)
		if sh := s.Tensor.Shape; len(sh) > 0 {
			unit = sh[len(sh)-1]
		}
		b.changed[tg.Name] = &bakedTensor{target: tg, src: s, unit: unit}
	}
	return b, nil
}

// Plan returns the plan the model bakes.
func (b *Baked) Plan() *Plan { return b.plan }

// Computes reports whether an adapter changes t.
func (b *Baked) Computes(t *formats.Tensor) bool { return b.changed[t.Name] != nil }

// ReadFloat32 reads elements [first, first+len(dst)) of a tensor with the
// adapters' deltas added, in float32; an unchanged tensor is decoded as
// stored.
func (b *Baked) ReadFloat32(t *formats.Tensor, dst []float32, first int64) error {
	bt := b.changed[t.Name]
	sc := bakePool.Get().(*bakeScratch)
	defer bakePool.Put(sc)
	if bt == nil {
		return tensor.Plain(b.Model, *t).Read(dst, first, &sc.s)
	}
	return bt.sum(dst, first, sc)
}

// sum computes elements [first, first+len(dst)) of the baked tensor. The
// deltas are added over whole rows of the target (which DoRA layers need),
// so a range that cuts rows is widened and copied out.
func (bt *bakedTensor) sum(dst []float32, first int64, sc *bakeScratch) error {
	n := int64(len(dst))
	total := bt.src.Elements()
	if first < 0 || first+n > total {
		return fmt.Errorf("%s: tensor %q: elements [%d, %d) out of range (%d elements)", bt.src.Tensor.File, bt.src.Name, first, first+n, total)
	}
	if n == 0 {
		return nil
	}
	re := bt.target.RowElems
	lo, hi := first/re*re, (first+n+re-1)/re*re
	wide := dst
	if lo != first || hi != first+n {
		if int64(cap(sc.wide)) < hi-lo {
			sc.wide = make([]float32, hi-lo)
		}
		wide = sc.wide[:hi-lo]
	}
	if err := bt.src.Read(wide, lo, &sc.s); err != nil {
		return err
	}
	if err := bt.target.AddTo(wide, lo); err != nil {
		return fmt.Errorf("%s: %w", bt.src.Tensor.File, err)
	}
	if len(wide) != len(dst) {
		copy(dst, wide[first-lo:])
	}
	if bt.read.Add(n) >= total {
		// Read whole: free the factors until the next pass needs them.
		bt.read.Store(0)
		bt.target.Release()
	}
	return nil
}

// ReadTensorAt reads the bytes of a tensor: a changed tensor's baked
// values encoded to its type (whole stored rows are encoded, and the bytes
// asked for copied out), any other tensor's bytes as stored.
func (b *Baked) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	bt := b.changed[t.Name]
	if bt == nil {
		return b.Model.ReadTensorAt(t, p, off)
	}
	st := &bt.src.Tensor
	if off < 0 {
		return 0, fmt.Errorf("%s: tensor %q: negative offset %d", st.File, st.Name, off)
	}
	if off >= st.Size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), st.Size-off)
	bt.encOnce.Do(func() {
		bt.enc, bt.encErr = quant.Encoder(st.Type)
		if bt.encErr == nil && bt.enc.NeedsWeights {
			bt.encErr = fmt.Errorf("%s needs an importance matrix", st.Type)
		}
	})
	if bt.encErr != nil {
		return 0, fmt.Errorf("%s: tensor %q: cannot encode the baked values as %s: %v", st.File, st.Name, st.Type, bt.encErr)
	}
	ub, err := st.Type.RowBytes(bt.unit)
	if err != nil || ub <= 0 {
		return 0, fmt.Errorf("%s: tensor %q: rows of %d elements of %s: %v", st.File, st.Name, bt.unit, st.Type, err)
	}
	u0, u1 := off/ub, (off+want+ub-1)/ub
	sc := bakePool.Get().(*bakeScratch)
	defer bakePool.Put(sc)
	vals := sc.s.Float32s(0, int((u1-u0)*bt.unit))
	if err := bt.sum(vals, u0*bt.unit, sc); err != nil {
		return 0, err
	}
	enc := sc.s.Bytes(1, int((u1-u0)*ub))
	bt.enc.Quantize(enc, vals, nil)
	n := copy(p[:want], enc[off-u0*ub:])
	if int64(n) < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

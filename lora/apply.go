package lora

import (
	"fmt"
	"math"
	"sync"
)

// doraEps is added to each row norm, as LyCORIS adds float32's epsilon.
const doraEps = 1.1920929e-07

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Prepare reads the factors of every layer that changes t (once, however
// many goroutines call it) so that AddTo can run. Release frees them.
func (t *Target) Prepare() error {
	var err error
	for i := range t.Changes {
		if _, err = t.kernel(i); err != nil {
			break
		}
	}
	return err
}

// kernel returns change i's kernel, acquiring it on first use.
func (t *Target) kernel(i int) (*kernel, error) {
	c := &t.Changes[i]
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.kernels == nil {
		t.kernels = make([]*kernel, len(t.Changes))
	}
	if t.kernels[i] != nil {
		return t.kernels[i], nil
	}
	k, err := c.Layer.acquire()
	if err != nil {
		return nil, err
	}
	t.kernels[i] = k
	return k, nil
}

// Release frees the factors Prepare read (a layer shared with targets
// still in use stays loaded). AddTo after Release prepares again.
func (t *Target) Release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, k := range t.kernels {
		if k != nil {
			t.Changes[i].Layer.release()
		}
	}
	t.kernels = nil
}

// AddTo applies the changes to elements [off, off+len(dst)) of the tensor
// (row-major, PyTorch order), which dst holds as float32: for a plain
// adapter it adds strength·scale·delta, for a DoRA layer it rescales each
// row. Different ranges may be computed concurrently. Ranges made of whole
// rows (off and len(dst) multiples of RowElems) cost least; a DoRA change
// needs them, since it scales each row by its norm.
func (t *Target) AddTo(dst []float32, off int64) error {
	end := off + int64(len(dst))
	if off < 0 || end > t.Rows*t.RowElems {
		return fmt.Errorf("tensor %q: elements [%d, %d) out of range (%d)", t.Name, off, end, t.Rows*t.RowElems)
	}
	if len(dst) == 0 {
		return nil
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	re := t.RowElems
	r0, r1 := off/re, (end+re-1)/re
	for i := range t.Changes {
		c := &t.Changes[i]
		lo, hi := max(r0, c.TargetRow), min(r1, c.TargetRow+c.Rows)
		if lo >= hi {
			continue
		}
		k, err := t.kernel(i)
		if err != nil {
			return err
		}
		strength := t.plan.Uses[c.Use].Strength
		l := c.Layer
		if l.DoRA {
			if off%re != 0 || int64(len(dst))%re != 0 {
				return fmt.Errorf("tensor %q: elements [%d, %d) are not whole rows of %d, which a DoRA layer (%s) needs", t.Name, off, end, re, l.Module)
			}
			if err := t.dora(k, c, dst[(lo-r0)*re:(hi-r0)*re], lo, hi, strength, s); err != nil {
				return err
			}
			continue
		}
		coef := float32(strength * l.Scale)
		// Whole rows straight into dst; a partial first or last row
		// through a row of scratch.
		full0, full1 := max(lo, (off+re-1)/re), min(hi, end/re)
		if full0 < full1 {
			d := dst[full0*re-off : full1*re-off]
			if err := l.addRows(k, d, int(full0-c.TargetRow+c.LayerRow), int(full1-full0), coef, s); err != nil {
				return err
			}
		}
		for r := lo; r < hi; r++ {
			if r >= full0 && r < full1 {
				continue
			}
			row := s.row(int(re))
			if err := l.addRows(k, row, int(r-c.TargetRow+c.LayerRow), 1, coef, s); err != nil {
				return err
			}
			a, z := max(r*re, off), min((r+1)*re, end)
			for j := a; j < z; j++ {
				dst[j-off] += row[j-r*re]
			}
		}
	}
	return nil
}

// dora applies a weight-decomposed layer to rows [lo, hi) held in w: each
// row becomes W + s·(m/‖W+ΔW‖·(W+ΔW) − W), with ΔW at strength 1 (as
// ComfyUI interpolates the strength; LyCORIS's own merge agrees at 1).
func (t *Target) dora(k *kernel, c *Change, w []float32, lo, hi int64, strength float64, s *scratch) error {
	re := int(t.RowElems)
	l := c.Layer
	for r := lo; r < hi; r++ {
		row := w[int(r-lo)*re : int(r-lo+1)*re]
		delta := s.row(re)
		lr := int(r - c.TargetRow + c.LayerRow)
		if err := l.addRows(k, delta, lr, 1, float32(l.Scale), s); err != nil {
			return err
		}
		var n float64
		for j, v := range row {
			x := float64(v) + float64(delta[j])
			n += x * x
		}
		f := float64(k.dora[lr]) / (math.Sqrt(n) + doraEps)
		for j, v := range row {
			x := float64(v) + float64(delta[j])
			row[j] = float32(float64(v) + strength*(f*x-float64(v)))
		}
	}
	return nil
}

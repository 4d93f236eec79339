package lora

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// kernel is a layer's factors in the form that gives rows of its delta
// cheaply. Every kind reduces to one of three: a low-rank product (LoRA,
// Tucker cores folded into the down factor), a Hadamard product of two of
// them (LoHa), or a Kronecker product of two small matrices (LoKr). A full
// difference is read from the file row by row instead.
type kernel struct {
	rows, cols int
	lr         [2]lowRank // LoRA uses lr[0]; LoHa both
	kron       *kron
	dora       []float32 // the magnitude of each output row
}

// lowRank is up [rows, r] times down [r, cols].
type lowRank struct {
	r        int
	up, down []float32
}

// kron is the Kronecker product of w1 [a, c] and w2 [b, d]: row i*b+j of
// the product holds w1[i, k]·w2[j, :] for k in 0..c.
type kron struct {
	a, b, c, d int
	w1, w2     []float32
}

// acquire makes the layer's kernel (reading its factors once) and counts
// one more user; release drops the kernel when the last user is done.
func (l *Layer) acquire() (*kernel, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ready {
		l.k, l.kErr = l.load()
		l.ready = true
	}
	if l.kErr != nil {
		return nil, l.kErr
	}
	l.refs++
	return l.k, nil
}

func (l *Layer) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs > 0 {
		l.refs--
	}
	if l.refs == 0 {
		l.k, l.kErr, l.ready = nil, nil, false
	}
}

func (l *Layer) floats(r Role) ([]float32, error) {
	return readFloats(l.adapter.model, l.t[r])
}

// load reads the factors and folds them into a kernel.
func (l *Layer) load() (*kernel, error) {
	k := &kernel{rows: int(l.Rows), cols: int(l.Cols)}
	var err error
	switch l.Kind {
	case LoRA:
		k.lr[0], err = l.loadLoRA()
	case LoHa:
		for i, rs := range [2][3]Role{{RoleHadaW1A, RoleHadaW1B, RoleHadaT1}, {RoleHadaW2A, RoleHadaW2B, RoleHadaT2}} {
			if k.lr[i], err = l.loadHada(rs[0], rs[1], rs[2]); err != nil {
				break
			}
		}
	case LoKr:
		k.kron, err = l.loadLoKr()
	case Full:
		// Rows are read when needed.
	}
	if err == nil && l.DoRA {
		k.dora, err = l.floats(RoleDoRA)
	}
	if err != nil {
		return nil, err
	}
	return k, nil
}

func (l *Layer) loadLoRA() (lowRank, error) {
	up, err := l.floats(RoleUp)
	if err != nil {
		return lowRank{}, err
	}
	down, err := l.floats(RoleDown)
	if err != nil {
		return lowRank{}, err
	}
	rUp := int(l.t[RoleUp].Shape[1])
	mid := l.t[RoleMid]
	if mid == nil {
		return lowRank{r: rUp, up: up, down: down}, nil
	}
	m, err := l.floats(RoleMid)
	if err != nil {
		return lowRank{}, err
	}
	// down'[a, i*kk+s] = sum_b mid[a, b, s]·down[b, i]: the kernel of the
	// mid convolution applied after the 1x1 down projection.
	rDown, in := int(mid.Shape[1]), int(l.t[RoleDown].Shape[1])
	kk := int(prod(mid.Shape[2:]))
	return lowRank{r: rUp, up: up, down: tuckerFold(m, down, rUp, rDown, in, kk)}, nil
}

// tuckerFold returns out [ra, in*kk] with out[a, i*kk+s] = sum_b
// core[a, b, s]·w[b, i], for core [ra, rb, kk] and w [rb, in].
func tuckerFold(core, w []float32, ra, rb, in, kk int) []float32 {
	out := make([]float32, ra*in*kk)
	acc := make([]float64, in*kk)
	for a := 0; a < ra; a++ {
		clear(acc)
		for b := 0; b < rb; b++ {
			wb := w[b*in : (b+1)*in]
			c := core[(a*rb+b)*kk : (a*rb+b+1)*kk]
			for i, x := range wb {
				xv := float64(x)
				row := acc[i*kk : (i+1)*kk]
				for s, cv := range c {
					row[s] += float64(cv) * xv
				}
			}
		}
		dst := out[a*in*kk : (a+1)*in*kk]
		for j, v := range acc {
			dst[j] = float32(v)
		}
	}
	return out
}

// transpose returns the [cols, rows] transpose of m [rows, cols].
func transpose(m []float32, rows, cols int) []float32 {
	t := make([]float32, len(m))
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			t[j*rows+i] = m[i*cols+j]
		}
	}
	return t
}

func (l *Layer) loadHada(ra, rb, rt Role) (lowRank, error) {
	wa, err := l.floats(ra)
	if err != nil {
		return lowRank{}, err
	}
	wb, err := l.floats(rb)
	if err != nil {
		return lowRank{}, err
	}
	if l.t[rt] == nil {
		return lowRank{r: int(l.t[ra].Shape[1]), up: wa, down: wb}, nil
	}
	t, err := l.floats(rt)
	if err != nil {
		return lowRank{}, err
	}
	// Tucker: w[p, q, s] = sum_ij t[i, j, s]·wa[i, p]·wb[j, q]; as a
	// low-rank product, up = waᵀ and down folds t with wb.
	ts := l.t[rt].Shape
	r1, r2, kk := int(ts[0]), int(ts[1]), int(prod(ts[2:]))
	out, in := int(l.t[ra].Shape[1]), int(l.t[rb].Shape[1])
	return lowRank{r: r1, up: transpose(wa, r1, out), down: tuckerFold(t, wb, r1, r2, in, kk)}, nil
}

func (l *Layer) loadLoKr() (*kron, error) {
	k := &kron{}
	var err error
	if w1 := l.t[RoleLoKrW1]; w1 != nil {
		k.a, k.c = int(w1.Shape[0]), int(w1.Shape[1])
		if k.w1, err = l.floats(RoleLoKrW1); err != nil {
			return nil, err
		}
	} else {
		wa, wb := l.t[RoleLoKrW1A], l.t[RoleLoKrW1B]
		k.a, k.c = int(wa.Shape[0]), int(wb.Shape[1])
		if k.w1, err = l.product(RoleLoKrW1A, RoleLoKrW1B); err != nil {
			return nil, err
		}
	}
	switch {
	case l.t[RoleLoKrW2] != nil:
		w2 := l.t[RoleLoKrW2]
		k.b, k.d = int(w2.Shape[0]), int(prod(w2.Shape[1:]))
		k.w2, err = l.floats(RoleLoKrW2)
	case l.t[RoleLoKrT2] != nil:
		ts, wa, wb := l.t[RoleLoKrT2].Shape, l.t[RoleLoKrW2A], l.t[RoleLoKrW2B]
		r1, r2, kk := int(ts[0]), int(ts[1]), int(prod(ts[2:]))
		b, d := int(wa.Shape[1]), int(wb.Shape[1])
		var t, a, bb []float32
		if t, err = l.floats(RoleLoKrT2); err == nil {
			if a, err = l.floats(RoleLoKrW2A); err == nil {
				bb, err = l.floats(RoleLoKrW2B)
			}
		}
		if err == nil {
			folded := tuckerFold(t, bb, r1, r2, d, kk) // [r1, d*kk]
			k.b, k.d = b, d*kk
			k.w2 = matmul(transpose(a, r1, b), folded, b, r1, d*kk)
		}
	default:
		wa, wb := l.t[RoleLoKrW2A], l.t[RoleLoKrW2B]
		k.b, k.d = int(wa.Shape[0]), int(prod(wb.Shape[1:]))
		k.w2, err = l.product(RoleLoKrW2A, RoleLoKrW2B)
	}
	if err != nil {
		return nil, err
	}
	if k.a*k.b != int(l.Rows) || k.c*k.d != int(l.Cols) {
		return nil, l.errf("LoKr factors give %dx%d, not %dx%d", k.a*k.b, k.c*k.d, l.Rows, l.Cols)
	}
	return k, nil
}

// product reads wa [m, r] and wb [r, n...] and returns their product.
func (l *Layer) product(ra, rb Role) ([]float32, error) {
	a, err := l.floats(ra)
	if err != nil {
		return nil, err
	}
	b, err := l.floats(rb)
	if err != nil {
		return nil, err
	}
	m, r := int(l.t[ra].Shape[0]), int(l.t[ra].Shape[1])
	return matmul(a, b, m, r, len(b)/r), nil
}

// matmul returns a [m, r] times b [r, n], accumulated in float64.
func matmul(a, b []float32, m, r, n int) []float32 {
	out := make([]float32, m*n)
	acc := make([]float64, n)
	for i := 0; i < m; i++ {
		clear(acc)
		for k := 0; k < r; k++ {
			x := float64(a[i*r+k])
			if x == 0 {
				continue
			}
			for j, y := range b[k*n : (k+1)*n] {
				acc[j] += x * float64(y)
			}
		}
		for j, v := range acc {
			out[i*n+j] = float32(v)
		}
	}
	return out
}

// addRows adds coef times rows [first, first+n) of the layer's delta to
// dst, which holds n rows of k.cols elements, using s for LoHa's two
// products and a full difference's raw rows.
func (l *Layer) addRows(k *kernel, dst []float32, first, n int, coef float32, s *scratch) error {
	cols := k.cols
	switch l.Kind {
	case LoRA:
		k.lr[0].addRows(dst, first, n, cols, coef)
	case LoHa:
		// Both products for a block of rows, then their Hadamard product.
		const block = 8
		a, b := s.floats(2 * block * cols)
		for i := 0; i < n; i += block {
			nb := min(block, n-i)
			a, b := a[:nb*cols], b[:nb*cols]
			clear(a)
			clear(b)
			k.lr[0].addRows(a, first+i, nb, cols, 1)
			k.lr[1].addRows(b, first+i, nb, cols, 1)
			rows := dst[i*cols : (i+nb)*cols]
			for j := range rows {
				rows[j] += coef * a[j] * b[j]
			}
		}
	case LoKr:
		k.kron.addRows(dst, first, n, coef)
	case Full:
		return l.addDiffRows(dst, first, n, coef, s)
	}
	return nil
}

// lowRankTile is the width of the column tiles of lowRank.addRows: a tile
// of down (rank × tile floats, 128 KiB at rank 64) stays in the L2 cache
// while every row of the chunk passes over it.
const lowRankTile = 512

// addRows adds coef·up[first:first+n]·down to dst. Columns are tiled so
// that down is read from cache, not memory, for all rows but the first;
// within a tile two rows and four ranks are done per pass, eight
// multiply-adds for every four loads of down and two of dst.
func (lr *lowRank) addRows(dst []float32, first, n, cols int, coef float32) {
	r := lr.r
	for j0 := 0; j0 < cols; j0 += lowRankTile {
		j1 := min(j0+lowRankTile, cols)
		i := 0
		for ; i+2 <= n; i += 2 {
			u0 := lr.up[(first+i)*r : (first+i+1)*r]
			u1 := lr.up[(first+i+1)*r : (first+i+2)*r]
			x0 := dst[i*cols+j0 : i*cols+j1]
			x1 := dst[(i+1)*cols+j0 : (i+1)*cols+j1]
			x1 = x1[:len(x0)]
			k := 0
			for ; k+4 <= r; k += 4 {
				a0, a1, a2, a3 := coef*u0[k], coef*u0[k+1], coef*u0[k+2], coef*u0[k+3]
				b0, b1, b2, b3 := coef*u1[k], coef*u1[k+1], coef*u1[k+2], coef*u1[k+3]
				d0 := lr.down[k*cols+j0 : k*cols+j1]
				d1 := lr.down[(k+1)*cols+j0 : (k+1)*cols+j1]
				d2 := lr.down[(k+2)*cols+j0 : (k+2)*cols+j1]
				d3 := lr.down[(k+3)*cols+j0 : (k+3)*cols+j1]
				d0, d1, d2, d3 = d0[:len(x0)], d1[:len(x0)], d2[:len(x0)], d3[:len(x0)]
				for j := range x0 {
					p0, p1, p2, p3 := d0[j], d1[j], d2[j], d3[j]
					x0[j] += a0*p0 + a1*p1 + a2*p2 + a3*p3
					x1[j] += b0*p0 + b1*p1 + b2*p2 + b3*p3
				}
			}
			for ; k < r; k++ {
				a, bb := coef*u0[k], coef*u1[k]
				d := lr.down[k*cols+j0 : k*cols+j1]
				d = d[:len(x0)]
				for j, p := range d {
					x0[j] += a * p
					x1[j] += bb * p
				}
			}
		}
		for ; i < n; i++ {
			u := lr.up[(first+i)*r : (first+i+1)*r]
			x := dst[i*cols+j0 : i*cols+j1]
			k := 0
			for ; k+4 <= r; k += 4 {
				a0, a1, a2, a3 := coef*u[k], coef*u[k+1], coef*u[k+2], coef*u[k+3]
				d0 := lr.down[k*cols+j0 : k*cols+j1]
				d1 := lr.down[(k+1)*cols+j0 : (k+1)*cols+j1]
				d2 := lr.down[(k+2)*cols+j0 : (k+2)*cols+j1]
				d3 := lr.down[(k+3)*cols+j0 : (k+3)*cols+j1]
				d0, d1, d2, d3 = d0[:len(x)], d1[:len(x)], d2[:len(x)], d3[:len(x)]
				for j := range x {
					x[j] += a0*d0[j] + a1*d1[j] + a2*d2[j] + a3*d3[j]
				}
			}
			for ; k < r; k++ {
				a := coef * u[k]
				d := lr.down[k*cols+j0 : k*cols+j1]
				d = d[:len(x)]
				for j, p := range d {
					x[j] += a * p
				}
			}
		}
	}
}

func (kr *kron) addRows(dst []float32, first, n int, coef float32) {
	cols := kr.c * kr.d
	for i := 0; i < n; i++ {
		r := first + i
		w1 := kr.w1[(r/kr.b)*kr.c : (r/kr.b+1)*kr.c]
		w2 := kr.w2[(r%kr.b)*kr.d : (r%kr.b+1)*kr.d]
		row := dst[i*cols : (i+1)*cols]
		for k, x := range w1 {
			s := coef * x
			seg := row[k*kr.d : (k+1)*kr.d]
			seg = seg[:len(w2)]
			for j, y := range w2 {
				seg[j] += s * y
			}
		}
	}
}

// addDiffRows reads rows of a stored difference and adds them.
func (l *Layer) addDiffRows(dst []float32, first, n int, coef float32, s *scratch) error {
	r := RoleDiff
	if l.Bias {
		r = RoleDiffBias
	}
	t := l.t[r]
	rb, err := t.Type.RowBytes(l.Cols)
	if err != nil {
		return fmt.Errorf("%s: tensor %q: %v", t.File, t.Name, err)
	}
	if want, err := t.Type.Bytes(t.Shape); err != nil || want != t.Size {
		return fmt.Errorf("%s: tensor %q: %v holds %d bytes, not what %s %v needs", t.File, t.Name, t.Shape, t.Size, t.Type, t.Shape)
	}
	raw := s.bytes(int(rb) * n)
	if err := formats.ReadFull(l.adapter.model, t, raw, int64(first)*rb); err != nil {
		return err
	}
	vals, _ := s.floats2(n * int(l.Cols))
	if err := quant.DecodeFloats(t.Type, vals, raw); err != nil {
		return fmt.Errorf("%s: tensor %q: %v", t.File, t.Name, err)
	}
	for j, v := range vals {
		dst[j] += coef * v
	}
	return nil
}

// scratch holds reusable buffers for one goroutine's delta computation.
type scratch struct {
	f, g, r []float32
	b       []byte
}

// row returns a zeroed buffer of n floats, distinct from the others.
func (s *scratch) row(n int) []float32 {
	if cap(s.r) < n {
		s.r = make([]float32, n)
	}
	r := s.r[:n]
	clear(r)
	return r
}

// floats returns two zeroed-length buffers of n/2 floats each.
func (s *scratch) floats(n int) ([]float32, []float32) {
	if cap(s.f) < n {
		s.f = make([]float32, n)
	}
	f := s.f[:n]
	return f[:n/2], f[n/2:]
}

// floats2 returns a buffer of n floats distinct from floats'.
func (s *scratch) floats2(n int) ([]float32, bool) {
	if cap(s.g) < n {
		s.g = make([]float32, n)
	}
	return s.g[:n], true
}

func (s *scratch) bytes(n int) []byte {
	if cap(s.b) < n {
		s.b = make([]byte, n)
	}
	return s.b[:n]
}

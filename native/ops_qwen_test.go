//go:build cgo

package native

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// dotAVX2FMA is the plain-Go statement of MulMatDotF32's summation (the
// order of ggml_vec_dot_f32 on x86 with AVX2 as gcc compiles its scalar
// tail under its default contraction: four products at a time rounded,
// the last one to three fused), written from that description, not from
// the C.
func dotAVX2FMA(x, y []float32) float32 {
	fma := func(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }
	var acc [4][8]float32
	np := len(x) &^ 31
	for i := 0; i < np; i += 32 {
		for j := range 4 {
			for l := range 8 {
				acc[j][l] = fma(x[i+8*j+l], y[i+8*j+l], acc[j][l])
			}
		}
	}
	var lane [8]float32
	for l := range 8 {
		lane[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l])
	}
	sum := ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]))
	// gcc's tail: groups of four products rounded, then added one by one;
	// the last len%4 values past the runs fused
	nf := np + (len(x)-np)&^3
	for i := np; i < nf; i++ {
		sum += x[i] * y[i]
	}
	for i := nf; i < len(x); i++ {
		sum = fma(x[i], y[i], sum)
	}
	return sum
}

// mulMatDot runs MulMatDotF32 on a [k, m, abatch] and b [k, n, batch]
// with the given values and threads and returns the [m, n, batch]
// product; with strided, b is a view of every other row of a [k, 2n,
// batch] tensor.
func mulMatDot(t *testing.T, av, bv []float32, k, m, n, batch, abatch int64, threads int, strided bool) []float32 {
	t.Helper()
	be, err := NewCPUBackend(threads)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	ctx, _ := NewContext(16, 16)
	defer ctx.Free()
	a, _ := ctx.NewTensor(formats.F32, k, m, abatch)
	a.SetInput()
	rows := n
	if strided {
		rows = 2 * n
	}
	b, _ := ctx.NewTensor(formats.F32, k, rows, batch)
	b.SetInput()
	var out Tensor
	func() {
		defer Recover(&err)
		bb := b
		if strided {
			nb := b.Nb()
			bb = ctx.View(b, [4]int64{k, n, batch, 1}, 2*nb[1], nb[2], nb[3], 0)
		}
		out = ctx.MulMatDotF32(a, bb).SetOutput()
	}()
	if err != nil {
		t.Fatal(err)
	}
	gr := ctx.NewGraph(16)
	gr.Expand(out)
	alloc := be.NewAllocator()
	defer alloc.Free()
	if err := alloc.Alloc(gr); err != nil {
		t.Fatal(err)
	}
	if err := a.SetF32(av); err != nil {
		t.Fatal(err)
	}
	if err := b.SetF32(bv); err != nil {
		t.Fatal(err)
	}
	if err := be.Compute(gr); err != nil {
		t.Fatal(err)
	}
	v, err := out.F32()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Every element of the product is the dot product of its rows summed in
// ggml's AVX2 order with fused multiply-adds, bit for bit, for widths
// below, at and past whole runs of 32, any thread count, a strided b and
// a's batches broadcast over b's.
func TestMulMatDotF32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		k, m, n, batch, abatch int64
		threads                int
		strided                bool
	}{
		{7, 3, 2, 1, 1, 1, false},
		{32, 4, 5, 2, 2, 2, false},
		{79, 6, 5, 3, 3, 3, false},
		{128, 5, 9, 2, 2, 2, true},
		{49, 7, 7, 8, 2, 2, false}, // grouped-query: 8 query heads over 2 key heads
	} {
		av := make([]float32, c.k*c.m*c.abatch)
		rows := c.n
		if c.strided {
			rows = 2 * c.n
		}
		bv := make([]float32, c.k*rows*c.batch)
		for i := range av {
			av[i] = float32(r.NormFloat64())
		}
		for i := range bv {
			bv[i] = float32(r.NormFloat64())
		}
		got := mulMatDot(t, av, bv, c.k, c.m, c.n, c.batch, c.abatch, c.threads, c.strided)
		for s := range c.batch {
			for j := range c.n {
				row := j
				if c.strided {
					row = 2 * j
				}
				y := bv[(s*rows+row)*c.k : (s*rows+row+1)*c.k]
				sa := s / (c.batch / c.abatch)
				for i := range c.m {
					x := av[(sa*c.m+i)*c.k : (sa*c.m+i+1)*c.k]
					want := dotAVX2FMA(x, y)
					if g := got[(s*c.n+j)*c.m+i]; math.Float32bits(g) != math.Float32bits(want) {
						t.Fatalf("k=%d: [%d, %d, %d] = %g, want %g", c.k, i, j, s, g, want)
					}
				}
			}
		}
	}
}

// The fused tail differs from separately rounded products: -1 + 3·(1/3)
// is 2^-26 when the product is not rounded first and 0 when it is, so the
// test above can tell the two summations apart.
// A group of four in the tail is rounded product by product, as gcc's
// vectorised tail computes it: the same values padded to four sum to 0.
func TestDotAVX2FMAFusesTheTail(t *testing.T) {
	third := float32(1) / 3
	fused := dotAVX2FMA([]float32{1, 3}, []float32{-1, third})
	rounded := float32(-1) + float32(float32(3)*third) // the conversion rounds the product
	if fused == rounded || fused == 0 {
		t.Fatalf("fused %g, separately rounded %g: want them to differ", fused, rounded)
	}
	if four := dotAVX2FMA([]float32{1, 3, 0, 0}, []float32{-1, third, 0, 0}); four != rounded {
		t.Fatalf("a group of four gives %g, want the rounded sum %g", four, rounded)
	}
}

// RopeNeoxFMA turns each NeoX pair by the angle pos·base^(-2i/dims) with
// one fused multiply-add per value over the other product rounded first.
// Head 0 of every position holds (1, 0) pairs, which the rotation maps
// exactly to (cos, sin): those are checked against float64 trigonometry,
// and the other heads, bit for bit, against a Go reference that uses them.
func TestRopeNeoxFMA(t *testing.T) {
	const d, dims, heads, l = 8, 6, 3, 5
	const base = 1e4
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, d*heads*l)
	for p := range l {
		for h := range heads {
			row := x[(p*heads+h)*d : (p*heads+h+1)*d]
			for i := range row {
				row[i] = float32(r.NormFloat64())
			}
			if h == 0 {
				for i := range dims / 2 {
					row[i], row[i+dims/2] = 1, 0
				}
			}
		}
	}
	pos := []int32{0, 3, 17, 250, 4096}
	be, err := NewCPUBackend(2)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	ctx, _ := NewContext(8, 8)
	defer ctx.Free()
	xt, _ := ctx.NewTensor(formats.F32, d, heads, l)
	xt.SetInput()
	pt, _ := ctx.NewTensor(formats.I32, l)
	pt.SetInput()
	var y Tensor
	func() { defer Recover(&err); y = ctx.RopeNeoxFMA(xt, pt, dims, base).SetOutput() }()
	if err != nil {
		t.Fatal(err)
	}
	gr := ctx.NewGraph(8)
	gr.Expand(y)
	alloc := be.NewAllocator()
	defer alloc.Free()
	if err := alloc.Alloc(gr); err != nil {
		t.Fatal(err)
	}
	xt.SetF32(x)
	pb := make([]byte, 4*l)
	for i, p := range pos {
		binary.LittleEndian.PutUint32(pb[4*i:], uint32(p))
	}
	pt.SetData(pb)
	if err := be.Compute(gr); err != nil {
		t.Fatal(err)
	}
	got, _ := y.F32()
	fma := func(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }
	for p := range l {
		probe := got[p*heads*d : p*heads*d+d]
		for i := range dims / 2 {
			c, s := probe[i], probe[i+dims/2]
			angle := float64(pos[p]) * math.Pow(base, -2*float64(i)/dims)
			if math.Abs(float64(c)-math.Cos(angle)) > 1e-4 || math.Abs(float64(s)-math.Sin(angle)) > 1e-4 {
				t.Fatalf("pos %d pair %d: cos, sin = %g, %g, want %g, %g", pos[p], i, c, s, math.Cos(angle), math.Sin(angle))
			}
			for h := 1; h < heads; h++ {
				in := x[(p*heads+h)*d:]
				out := got[(p*heads+h)*d:]
				x0, x1 := in[i], in[i+dims/2]
				w0, w1 := fma(x0, c, -float32(x1*s)), fma(x0, s, float32(x1*c))
				if out[i] != w0 || out[i+dims/2] != w1 {
					t.Fatalf("pos %d head %d pair %d: (%g, %g), want (%g, %g)", pos[p], h, i, out[i], out[i+dims/2], w0, w1)
				}
			}
		}
		for h := range heads {
			for i := dims; i < d; i++ {
				if got[(p*heads+h)*d+i] != x[(p*heads+h)*d+i] {
					t.Fatalf("pos %d head %d: channel %d past dims changed", pos[p], h, i)
				}
			}
		}
	}
}

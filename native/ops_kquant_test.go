//go:build cgo

package native

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// refQ8K quantizes one row to q8_K in plain Go, as ggml's reference
// quantizer does: per block of 256, the first value of largest magnitude
// gives iscale = -127/max; codes are round-half-even of the float product
// iscale·x, capped at 127; the block's scale is 1/iscale.
func refQ8K(x []float32) (codes []int8, scales []float32) {
	codes = make([]int8, len(x))
	scales = make([]float32, len(x)/256)
	for b := range scales {
		blk := x[b*256 : b*256+256]
		var amax, mx float32
		for _, v := range blk {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, mx = a, v
			}
		}
		if amax == 0 {
			continue
		}
		iscale := -127 / mx
		for i, v := range blk {
			p := iscale * v // a float32 product, rounded
			codes[b*256+i] = int8(min(127, math.RoundToEven(float64(p))))
		}
		scales[b] = 1 / iscale
	}
	return codes, scales
}

// fma32 is a·b + c rounded once to float32 (C's fmaf), through exact
// big-float arithmetic.
func fma32(a, b, c float32) float32 {
	z := new(big.Float).SetPrec(400).SetFloat64(float64(a) * float64(b)) // exact: 24+24 bits
	z.Add(z, new(big.Float).SetPrec(400).SetFloat64(float64(c)))
	f, _ := z.Float32()
	return f
}

// refQ6KDot is the product of one q6_K row and one activation row as
// stable-diffusion.cpp's ggml (8e800cef, AVX2) computes it, written from
// the block layout: per block, eight int32 lanes; lane n takes values
// 4n..4n+3 of each run of 32 as scale·q·a with q the unsigned 6-bit code
// and subtracts 32·scale·(sum of codes a) for the runs of 16 numbered 2n
// and 2n+1; each lane is accumulated in float32 by fused multiply-add
// with the two blocks' scales multiplied; the lanes are summed as
// ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)).
func refQ6KDot(w []byte, codes []int8, scales []float32) float32 {
	var acc [8]float32
	for b := range scales {
		blk := w[b*210 : b*210+210]
		ql, qh, a := blk[:128], blk[128:192], codes[b*256:b*256+256]
		sc := func(i int) int32 { return int32(int8(blk[192+i])) }
		var lane [8]int32
		for n := range 8 {
			var s0, s1 int32
			for i := range 16 {
				s0 += int32(a[32*n+i])
				s1 += int32(a[32*n+16+i])
			}
			lane[n] = -32 * (sc(2*n)*s0 + sc(2*n+1)*s1)
		}
		for e := range 256 {
			half, within := e/128, e%128
			run, pos := within/32, within%32
			l := ql[64*half+32*(run%2)+pos]
			lo := int32(l & 15)
			if run >= 2 {
				lo = int32(l >> 4)
			}
			hi := int32(qh[32*half+pos]>>(2*run)) & 3
			lane[pos/4] += sc(8*half+2*run+pos/16) * (lo | hi<<4) * int32(a[e])
		}
		var hd [1]float32
		if err := quant.DecodeFloats(formats.F16, hd[:], blk[208:210]); err != nil {
			panic(err)
		}
		d := scales[b] * hd[0]
		for n := range 8 {
			acc[n] = fma32(d, float32(lane[n]), acc[n])
		}
	}
	return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

// A q6_K weight's product in generate is the one stable-diffusion.cpp's
// ggml computes, bit for bit: the Go module's older ggml splits each
// block's integer sums into other lanes, so its float sums differ in the
// last bits (BENCHMARKS.md, issue 36). Checked against the plain-Go
// reference above on rows with outliers and zero blocks, through MulMat
// on a batched activation, with the scalar and the vector kernel; and
// against the dequantized float product, so that a layout mistake shared
// by the op and the reference cannot pass.
func TestQ6KProductAsSDCPP(t *testing.T) {
	be, err := NewCPUBackend(2)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	r := rand.New(rand.NewPCG(6, 36))
	const k, m, rows = 768, 40, 6
	wf := make([]float32, k*m)
	for i := range wf {
		wf[i] = float32(r.NormFloat64() * 0.05)
	}
	wq := make([]byte, k/256*210*m)
	if err := QuantizeChunkInto(formats.Q6_K, wq, wf, k, nil); err != nil {
		t.Fatal(err)
	}
	x := make([]float32, k*rows)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 2)
		if i%101 == 0 {
			x[i] *= 40 // outliers set a block's scale
		}
	}
	clear(x[256:512]) // a zero block
	q6KAsSDCPP = false
	theirs := q6kProduct(t, be, wq, x, k, m, rows)
	q6KAsSDCPP = true
	got := q6kProduct(t, be, wq, x, k, m, rows)
	differ := 0
	for i := range got {
		if got[i] != theirs[i] {
			differ++
		}
	}
	t.Logf("the linked ggml's own q6_K kernel differs in %d of %d outputs", differ, len(got))
	wd := make([]float32, k*m)
	if err := quant.DecodeFloats(formats.Q6_K, wd, wq); err != nil {
		t.Fatal(err)
	}
	row := k / 256 * 210
	for j := range rows {
		codes, scales := refQ8K(x[j*k : (j+1)*k])
		for i := range m {
			want := refQ6KDot(wq[i*row:(i+1)*row], codes, scales)
			if g := got[j*m+i]; math.Float32bits(g) != math.Float32bits(want) {
				t.Fatalf("row %d, output %d: MulMat gives %g, the reference %g", j, i, g, want)
			}
			for _, scalar := range []bool{true, false} {
				if g := q6kDotRow(wq[i*row:(i+1)*row], x[j*k:(j+1)*k], scalar); g != want {
					t.Fatalf("row %d, output %d: kernel (scalar %v) gives %g, the reference %g", j, i, scalar, g, want)
				}
			}
			// Rounding an activation to q8_K moves it by at most half a
			// step (absmax/127 of its block).
			var f, bound float64
			for c := range k {
				f += float64(wd[i*k+c]) * float64(x[j*k+c])
				bound += math.Abs(float64(wd[i*k+c])) * math.Abs(float64(scales[c/256])) / 2
			}
			if math.Abs(float64(want)-f) > bound*1.001+1e-4 {
				t.Fatalf("row %d, output %d: %g, the float product of the dequantized weight %g (bound %g)", j, i, want, f, bound)
			}
		}
	}
}

// q6kProduct runs MulMat of the q6_K weight wq [k, m] and x as [k, rows/2, 2].
func q6kProduct(t testing.TB, be *Backend, wq []byte, x []float32, k, m, rows int) []float32 {
	t.Helper()
	wctx, err := NewContext(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	tw, _ := wctx.NewTensor(formats.Q6_K, int64(k), int64(m))
	if _, err := be.AllocContext(wctx); err != nil {
		t.Fatal(err)
	}
	if err := tw.SetData(wq); err != nil {
		t.Fatal(err)
	}
	ctx, err := NewContext(4, 4)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := ctx.NewTensor(formats.F32, int64(k), int64(rows/2), 2)
	in.SetInput()
	y := ctx.MulMat(tw, in).SetOutput()
	gr := ctx.NewGraph(4)
	gr.Expand(y)
	if err := be.NewAllocator().Alloc(gr); err != nil {
		t.Fatal(err)
	}
	if err := in.SetF32(x); err != nil {
		t.Fatal(err)
	}
	if err := be.Compute(gr); err != nil {
		t.Fatal(err)
	}
	out, err := y.F32()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// BenchmarkQ6KProduct times a q6_K product of an SD 1.5 feed-forward shape
// (5120 to 1280, 64 tokens) through mulMatQ6K ("sdcpp") and through the
// linked ggml's own kernel ("ggml").
func BenchmarkQ6KProduct(b *testing.B) {
	be, err := NewCPUBackend(2)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Free()
	const k, m, rows = 5120, 1280, 64
	r := rand.New(rand.NewPCG(1, 2))
	wf := make([]float32, k*m)
	for i := range wf {
		wf[i] = float32(r.NormFloat64() * 0.05)
	}
	wq := make([]byte, k/256*210*m)
	if err := QuantizeChunkInto(formats.Q6_K, wq, wf, k, nil); err != nil {
		b.Fatal(err)
	}
	x := make([]float32, k*rows)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, sdcpp := range []bool{true, false} {
		name := map[bool]string{true: "sdcpp", false: "ggml"}[sdcpp]
		b.Run(name, func(b *testing.B) {
			q6KAsSDCPP = sdcpp
			defer func() { q6KAsSDCPP = true }()
			for b.Loop() {
				q6kProduct(b, be, wq, x, k, m, rows)
			}
		})
	}
}

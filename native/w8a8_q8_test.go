//go:build cgo

package native

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// refQ8Product is the product a q8_0 weight gives in ggml's CPU backend,
// in plain Go: each activation row is quantized in blocks of 32 (scale
// absmax/127 held as F16, codes rounded to nearest), each block's INT32 dot
// product is scaled by both F16 scales and the blocks are summed.
func refQ8Product(wq []byte, x []float32, k, n, rows int) []float64 {
	half := func(b []byte) float64 {
		var f [1]float32
		if err := quant.DecodeFloats(formats.F16, f[:], b[:2]); err != nil {
			panic(err)
		}
		return float64(f[0])
	}
	out := make([]float64, rows*n)
	codes := make([]int8, k)
	scales := make([]float64, k/32)
	for r := 0; r < rows; r++ {
		row := x[r*k : (r+1)*k]
		for b := 0; b < k/32; b++ {
			var amax float32
			for _, v := range row[b*32 : b*32+32] {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			d := amax / 127
			var id float32
			if d != 0 {
				id = 1 / d
			}
			var h [2]byte
			enc, _ := quant.Encoder(formats.F16)
			enc.Quantize(h[:], []float32{d}, nil)
			scales[b] = half(h[:])
			for i, v := range row[b*32 : b*32+32] {
				codes[b*32+i] = int8(math.RoundToEven(float64(v * id)))
			}
		}
		for j := 0; j < n; j++ {
			var sum float64
			for b := 0; b < k/32; b++ {
				blk := wq[(j*k/32+b)*34:]
				var dot int32
				for i := 0; i < 32; i++ {
					dot += int32(int8(blk[2+i])) * int32(codes[b*32+i])
				}
				sum += float64(dot) * half(blk) * scales[b]
			}
			out[r*n+j] = sum
		}
	}
	return out
}

// A q8_0 GGUF's linear layers run in generate as they run in sd-cli: ggml
// quantizes the activations to q8_0 and multiplies integers (its
// vec_dot_type), not the dequantized weight by float activations. The
// product agrees with the plain-Go integer reference to float rounding and
// is measurably apart from the float product, so a float path would fail.
// (sd-cli's ggml gives bit-identical outputs on the same inputs: BENCHMARKS.md, issue #18.)
func TestQ8ProductQuantizesActivations(t *testing.T) {
	be, err := NewCPUBackend(2)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range [][3]int{{320, 96, 64}, {1280, 40, 2}, {768, 33, 77}} {
		k, n, rows := c[0], c[1], c[2]
		wf := make([]float32, k*n)
		for i := range wf {
			wf[i] = float32(r.NormFloat64() * 0.05)
		}
		wq := make([]byte, k*n/32*34)
		if err := QuantizeChunkInto(formats.Q8_0, wq, wf, k, nil); err != nil {
			t.Fatal(err)
		}
		x := make([]float32, k*rows)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		wctx, err := NewContext(1, 0)
		if err != nil {
			t.Fatal(err)
		}
		tw, _ := wctx.NewTensor(formats.Q8_0, int64(k), int64(n))
		buf, err := be.AllocContext(wctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.SetData(wq); err != nil {
			t.Fatal(err)
		}
		ctx, err := NewContext(4, 4)
		if err != nil {
			t.Fatal(err)
		}
		in, _ := ctx.NewTensor(formats.F32, int64(k), int64(rows))
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
		got, err := y.F32()
		if err != nil {
			t.Fatal(err)
		}
		wd := make([]float32, k*n)
		if err := quant.DecodeFloats(formats.Q8_0, wd, wq); err != nil {
			t.Fatal(err)
		}
		ref := refQ8Product(wq, x, k, n, rows)
		var eq, ef, s float64
		for ri := 0; ri < rows; ri++ {
			for j := 0; j < n; j++ {
				var fl float64
				for i := 0; i < k; i++ {
					fl += float64(wd[j*k+i]) * float64(x[ri*k+i])
				}
				g := float64(got[ri*n+j])
				eq += (g - ref[ri*n+j]) * (g - ref[ri*n+j])
				ef += (g - fl) * (g - fl)
				s += fl * fl
			}
		}
		eq, ef = math.Sqrt(eq/s), math.Sqrt(ef/s)
		t.Logf("%v: %.2e against the integer product, %.2e against the float product", c, eq, ef)
		if eq > 1e-6 || ef < 1e-3 {
			t.Errorf("%v: relative error %.2e against the integer q8_0 product (want <= 1e-6), %.2e against the float product (want >= 1e-3)", c, eq, ef)
		}
		buf.Free()
		wctx.Free()
		ctx.Free()
	}
}

//go:build cgo

package native

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// BenchmarkW8A8VsF16 times the W8A8 product (activation quantization and
// the INT8 product, with bias) against ggml's F16 product with the bias
// added, which is what generate ran for INT8 modules before, on the linear
// layers of SD 1.5's UNet at 512x512 (4096 tokens at the first level) and
// its CLIP, 2 threads, both graphs computed alternately in one run. The
// activations are rotated by groups of 256 where the row length allows it,
// as in int8_convrot files (layers whose input is 320 or 640 wide are
// plain int8 there). It reports each side's milliseconds per product and
// w8a8/f16, the time ratio (below 1: W8A8 is faster), and which W8A8
// kernel ran. Like cmd/sdtool's end-to-end benchmark it refuses a ggml
// compiled without AVX2 on a CPU that has it (plain go test: set CGO_CFLAGS
// and CGO_CXXFLAGS as `go run ./build -n` prints), whose F16 product is
// not the one users run. SDTOOL_W8A8_BENCH_KERNEL picks a W8A8 kernel other
// than the best this CPU runs (avxvnni, avx2, generic), to stand in for a smaller
// CPU together with ggml compiled for it (-march=x86-64-v3 for AVX2 only).
func BenchmarkW8A8VsF16(b *testing.B) {
	if runtime.GOARCH == "amd64" && cpu.X86.HasAVX2 && !slices.Contains(LinkedX86(), "AVX2") {
		b.Fatal("ggml was compiled without AVX2: set CGO_CFLAGS and CGO_CXXFLAGS as `go run ./build -n` prints")
	}
	if k := os.Getenv("SDTOOL_W8A8_BENCH_KERNEL"); k != "" {
		best := W8A8Kernel()
		if err := UseW8A8Kernel(k); err != nil {
			b.Fatal(err)
		}
		defer UseW8A8Kernel(best)
	}
	be, err := NewCPUBackend(2)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Free()
	for _, s := range []struct{ k, n, rows int }{
		{320, 320, 4096}, {320, 2560, 4096}, {1280, 320, 4096}, {640, 640, 1024}, {1280, 1280, 256}, {768, 768, 77},
	} {
		group := 0
		if s.k%256 == 0 {
			group = 256
		}
		b.Run(fmt.Sprintf("%dx%dx%d", s.rows, s.k, s.n), func(b *testing.B) {
			b.Logf("kernel %s, group %d", W8A8Kernel(), group)
			benchW8A8(b, be, s.k, s.n, s.rows, group)
		})
	}
}

func benchW8A8(b *testing.B, be *Backend, k, n, rows, group int) {
	r := rand.New(rand.NewPCG(1, 2))
	wctx, _ := NewContext(4, 0)
	defer wctx.Free()
	w8, _ := wctx.NewTensor(formats.I8, int64(k), int64(n))
	w16, _ := wctx.NewTensor(formats.F16, int64(k), int64(n))
	ws, _ := wctx.NewTensor(formats.F32, int64(n))
	bias, _ := wctx.NewTensor(formats.F32, int64(n))
	buf, err := be.AllocContext(wctx)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	codes := make([]byte, k*n)
	f := make([]float32, k*n)
	for i := range codes {
		c := int8(r.IntN(255) - 127)
		codes[i], f[i] = byte(c), float32(c)*0.001
	}
	half := make([]byte, 2*k*n)
	quant.F32ToF16Row(half, f)
	scales := make([]float32, n)
	for i := range scales {
		scales[i] = 0.001
	}
	if err := w8.SetData(codes); err != nil {
		b.Fatal(err)
	}
	if err := w16.SetData(half); err != nil {
		b.Fatal(err)
	}
	if err := ws.SetF32(scales); err != nil {
		b.Fatal(err)
	}
	if err := bias.SetF32(scales); err != nil {
		b.Fatal(err)
	}
	x := make([]float32, k*rows)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	build := func(w8a8 bool) (*Context, *Graph, *Allocator) {
		ctx, _ := NewContext(16, 16)
		in, _ := ctx.NewTensor(formats.F32, int64(k), int64(rows))
		in.SetInput()
		var y Tensor
		if w8a8 {
			y = ctx.MulMatI8(w8, ctx.QuantizeActivations(in, group), ws, bias)
		} else {
			y = ctx.Add(ctx.MulMat(w16, in), bias)
		}
		y.SetOutput()
		g := ctx.NewGraph(16)
		g.Expand(y)
		a := be.NewAllocator()
		if err := a.Alloc(g); err != nil {
			b.Fatal(err)
		}
		if err := in.SetF32(x); err != nil {
			b.Fatal(err)
		}
		return ctx, g, a
	}
	c8, g8, a8 := build(true)
	defer c8.Free()
	defer a8.Free()
	c16, g16, a16 := build(false)
	defer c16.Free()
	defer a16.Free()
	var t8, t16 time.Duration
	iters := 0
	for b.Loop() {
		t0 := time.Now()
		if err := be.Compute(g8); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := be.Compute(g16); err != nil {
			b.Fatal(err)
		}
		t16 += time.Since(t1)
		t8 += t1.Sub(t0)
		iters++
	}
	b.ReportMetric(float64(t8.Microseconds())/1e3/float64(iters), "w8a8-ms")
	b.ReportMetric(float64(t16.Microseconds())/1e3/float64(iters), "f16-ms")
	b.ReportMetric(float64(t8)/float64(t16), "w8a8/f16")
}

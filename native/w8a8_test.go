//go:build cgo

package native

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/sdtool/sdtool/formats"
)

// refRotate is the Hadamard transform in stable-diffusion.cpp's order of
// operations (the order the C kernel documents), in plain Go.
func refRotate(v []float32) {
	g := len(v)
	s := float32(1) / float32(math.Sqrt(float64(g)))
	for i := range v {
		v[i] *= s
	}
	for stride := 1; stride < g; stride *= 4 {
		for base := 0; base < g; base += 4 * stride {
			for j := 0; j < stride; j++ {
				i0, i1, i2, i3 := base+j, base+j+stride, base+j+2*stride, base+j+3*stride
				a, b, c, d := v[i0], v[i1], v[i2], v[i3]
				v[i0] = float32(float32(a+b)+c) - d
				v[i1] = float32(float32(a+b)-c) + d
				v[i2] = float32(float32(a-b)+c) + d
				v[i3] = float32(float32(-a+b)+c) + d
			}
		}
	}
}

// refQuantize returns a row's codes and scale: rotated by groups, scale
// absmax/127, codes rounded half to even and clamped to ±127 (NaN to -127).
func refQuantize(row []float32, group int) ([]int8, float32) { return refQuantizeLv(row, group, 127) }

// refQuantizeLv is refQuantize with codes in ±lim and scale absmax/lim.
func refQuantizeLv(row []float32, group int, lim float32) ([]int8, float32) {
	v := append([]float32(nil), row...)
	if group > 0 {
		for g := 0; g < len(v); g += group {
			refRotate(v[g : g+group])
		}
	}
	var amax float32
	for _, x := range v {
		amax = max(amax, float32(math.Abs(float64(x))))
	}
	scale := amax / lim
	q := make([]int8, len(v))
	if scale == 0 {
		return q, 0
	}
	inv := 1 / scale
	for i, x := range v {
		c := math.RoundToEven(float64(float32(x * inv)))
		if math.IsNaN(c) { // 0·inf in a row whose 1/scale overflows: the kernels give -lim
			c = -float64(lim)
		}
		q[i] = int8(max(-float64(lim), min(float64(lim), c)))
	}
	return q, scale
}

// TestW8A8Levels: QuantizeActivationsLevels(x, g, 7), the int4 activation
// of ComfyUI's convrot_w4a4, gives plain Go's codes in ±7 and scale
// absmax/7 for every row, and the INT8 product reads them exactly.
func TestW8A8Levels(t *testing.T) {
	be, err := NewCPUBackend(2)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	const k, rows, n = 256, 5, 3
	r := rand.New(rand.NewPCG(11, 12))
	x := make([]float32, k*rows)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	w := make([]byte, k*n)
	for i := range w {
		w[i] = byte(int8(r.IntN(15) - 7))
	}
	ctx, err := NewContext(16, 16)
	if err != nil {
		t.Fatal(err)
	}
	tw, _ := ctx.NewTensor(formats.I8, k, n)
	tws, _ := ctx.NewTensor(formats.F32, n)
	in, _ := ctx.NewTensor(formats.F32, k, rows)
	in.SetInput()
	var xq, y Tensor
	func() {
		defer Recover(&err)
		xq = ctx.QuantizeActivationsLevels(in, 64, 7).SetOutput()
		y = ctx.MulMatI8(tw, xq, tws, Tensor{}).SetOutput()
	}()
	if err != nil {
		t.Fatal(err)
	}
	gr := ctx.NewGraph(16)
	gr.Expand(y)
	if err := be.NewAllocator().Alloc(gr); err != nil {
		t.Fatal(err)
	}
	if err := tw.SetData(w); err != nil {
		t.Fatal(err)
	}
	if err := tws.SetF32([]float32{1, 0.5, 2}); err != nil {
		t.Fatal(err)
	}
	if err := in.SetF32(x); err != nil {
		t.Fatal(err)
	}
	if err := be.Compute(gr); err != nil {
		t.Fatal(err)
	}
	packed, _ := xq.Data()
	got, _ := y.F32()
	for row := 0; row < rows; row++ {
		q, scale := refQuantizeLv(x[row*k:(row+1)*k], 64, 7)
		p := packed[row*(k+4) : (row+1)*(k+4)]
		for i := range q {
			if int8(p[i]) != q[i] {
				t.Fatalf("row %d: code %d is %d, want %d", row, i, int8(p[i]), q[i])
			}
		}
		if s := math.Float32frombits(binary.LittleEndian.Uint32(p[k:])); s != scale {
			t.Fatalf("row %d: scale %g, want %g", row, s, scale)
		}
		var dot int64
		for i := range q {
			dot += int64(q[i]) * int64(int8(w[i]))
		}
		if want := float32(dot) * scale; math.Abs(float64(got[row*n]-want)) > 1e-5*math.Abs(float64(want))+1e-6 {
			t.Fatalf("row %d: output %g, want %g", row, got[row*n], want)
		}
	}
}

// The W8A8 ops against plain Go, with every kernel set the CPU runs (plain
// C, AVX2, AVX-VNNI, AVX-512 VNNI): the codes and scales of every row exactly,
// the INT32 dot products exactly (recovered from the rescaled output), and
// the output within float32 rounding; rows, weight rows and row lengths
// that fill no whole block or vector, a zero row, a row whose scale
// is subnormal (its codes are ±127), rows longer than the kernel's row
// buffer, every rotation group, with and without bias, two and three
// threads (the blocks split unevenly), a graph run twice, and one
// quantized activation read by two products.
func TestW8A8Ops(t *testing.T) {
	levels := w8a8Levels()
	var names []string
	for _, l := range levels {
		was := useW8A8Level(l)
		names = append(names, W8A8Kernel())
		useW8A8Level(was)
	}
	// The kernels this CPU must run, by Go's own reading of CPUID.
	want := []string{"generic"}
	if x := cpu.X86; runtime.GOARCH == "amd64" && x.HasAVX2 {
		want = append(want, "avx2")
		if x.HasAVXVNNI && w8a8BuiltAVXVNNI {
			want = append(want, "avxvnni")
		}
		if x.HasAVX512VNNI && x.HasAVX512BW && x.HasAVX512VL {
			want = append(want, "avx512vnni")
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("kernels %v on this CPU, want %v", names, want)
	}
	for _, l := range levels {
		was := useW8A8Level(l)
		for _, threads := range []int{2, 3} {
			t.Logf("kernel %s, %d threads", W8A8Kernel(), threads)
			testW8A8Ops(t, threads)
		}
		useW8A8Level(was)
	}
}

func testW8A8Ops(t *testing.T, threads int) {
	be, err := NewCPUBackend(threads)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		k, n, rows, group int
		bias              bool
	}{
		{320, 70, 33, 0, true}, {768, 64, 5, 256, false}, {64, 3, 1, 16, true}, {1280, 130, 67, 256, true}, {40, 9, 2, 4, false},
		{44, 6, 3, 4, true}, {192, 17, 9, 64, true}, {320, 64, 203, 0, false}, {8448, 5, 3, 256, true}, {8256, 4, 2, 0, true},
		{100, 1, 4, 0, true},
	} {
		w := make([]int8, c.k*c.n)
		for i := range w {
			w[i] = int8(r.IntN(255) - 127)
		}
		w[0], w[1] = 127, -127
		ws, bias := make([]float32, c.n), make([]float32, c.n)
		for i := range ws {
			ws[i] = float32(r.Float64()*0.01 + 1e-4)
			bias[i] = float32(r.NormFloat64())
		}
		x := make([]float32, c.k*c.rows)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
			if r.IntN(200) == 0 {
				x[i] *= 40 // outliers, which the rotation spreads
			}
		}
		if c.rows > 1 {
			clear(x[c.k : 2*c.k]) // a zero row
		}
		if c.rows > 2 {
			for i := range x[2*c.k : 3*c.k] { // a row whose scale is subnormal: 1/scale overflows
				x[2*c.k+i] = float32(1e-38) * float32(1+r.IntN(3)) * float32(1-2*r.IntN(2))
			}
		}
		wctx, err := NewContext(3, 0)
		if err != nil {
			t.Fatal(err)
		}
		tw, _ := wctx.NewTensor(formats.I8, int64(c.k), int64(c.n))
		tws, _ := wctx.NewTensor(formats.F32, int64(c.n))
		tb, _ := wctx.NewTensor(formats.F32, int64(c.n))
		buf, err := be.AllocContext(wctx)
		if err != nil {
			t.Fatal(err)
		}
		wb := make([]byte, len(w))
		for i, v := range w {
			wb[i] = byte(v)
		}
		if err := tw.SetData(wb); err != nil {
			t.Fatal(err)
		}
		if err := tws.SetF32(ws); err != nil {
			t.Fatal(err)
		}
		if err := tb.SetF32(bias); err != nil {
			t.Fatal(err)
		}
		ctx, err := NewContext(64, 64)
		if err != nil {
			t.Fatal(err)
		}
		in, _ := ctx.NewTensor(formats.F32, int64(c.k), int64(c.rows))
		in.SetInput()
		var xq, y, y2 Tensor
		func() {
			defer Recover(&err)
			xq = ctx.QuantizeActivations(in, c.group).SetOutput()
			var b Tensor
			if c.bias {
				b = tb
			}
			y = ctx.MulMatI8(tw, xq, tws, b).SetOutput()
			y2 = ctx.MulMatI8(tw, xq, tws, Tensor{}).SetOutput()
		}()
		if err != nil {
			t.Fatal(err)
		}
		gr := ctx.NewGraph(64)
		gr.Expand(y)
		gr.Expand(y2)
		if gr.Nodes() != 3 {
			t.Errorf("%+v: %d nodes, want 3 (one quantization for both products)", c, gr.Nodes())
		}
		alloc := be.NewAllocator()
		if err := alloc.Alloc(gr); err != nil {
			t.Fatal(err)
		}
		// A first run on zeros: the second, which is checked, shows that
		// the ops hand out their blocks afresh on every run of a graph.
		if err := in.SetF32(make([]float32, len(x))); err != nil {
			t.Fatal(err)
		}
		if err := be.Compute(gr); err != nil {
			t.Fatal(err)
		}
		if err := in.SetF32(x); err != nil {
			t.Fatal(err)
		}
		if err := be.Compute(gr); err != nil {
			t.Fatal(err)
		}
		packed, err := xq.Data()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := y.F32()
		got2, _ := y2.F32()
		for row := 0; row < c.rows; row++ {
			q, scale := refQuantize(x[row*c.k:(row+1)*c.k], c.group)
			p := packed[row*(c.k+4) : (row+1)*(c.k+4)]
			for i := range q {
				if int8(p[i]) != q[i] {
					t.Fatalf("%+v row %d: code %d is %d, want %d", c, row, i, int8(p[i]), q[i])
				}
			}
			if s := math.Float32frombits(binary.LittleEndian.Uint32(p[c.k:])); s != scale {
				t.Fatalf("%+v row %d: scale %g, want %g", c, row, s, scale)
			}
			for j := 0; j < c.n; j++ {
				var dot int64
				for i := range q {
					dot += int64(q[i]) * int64(w[j*c.k+i])
				}
				want := float32(float32(dot)*scale) * ws[j]
				if g := got2[row*c.n+j]; g != want {
					t.Fatalf("%+v row %d, out %d: %g, want %g (dot %d)", c, row, j, g, want, dot)
				}
				if c.bias {
					want += bias[j]
				}
				if g := got[row*c.n+j]; math.Abs(float64(g-want)) > 1e-6*math.Max(1, math.Abs(float64(want))) {
					t.Fatalf("%+v row %d, out %d: %g, want %g", c, row, j, g, want)
				}
			}
		}
		alloc.Free()
		ctx.Free()
		buf.Free()
		wctx.Free()
	}
}

// UseW8A8Kernel takes every kernel this CPU runs by its name and refuses
// others, leaving the kernel in use as it was.
func TestUseW8A8Kernel(t *testing.T) {
	best := W8A8Kernel()
	defer UseW8A8Kernel(best)
	for _, name := range []string{"generic", best} {
		if err := UseW8A8Kernel(name); err != nil || W8A8Kernel() != name {
			t.Errorf("UseW8A8Kernel(%q): %v, kernel %s", name, err, W8A8Kernel())
		}
	}
	if err := UseW8A8Kernel("neon-sve9"); err == nil || W8A8Kernel() != best {
		t.Errorf("UseW8A8Kernel of an unknown kernel: %v, kernel %s (want an error and %s)", err, W8A8Kernel(), best)
	}
}

// Shapes that the kernels cannot take are refused with a shape error, not
// a ggml abort.
func TestW8A8Refused(t *testing.T) {
	ctx, err := NewContext(16, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free()
	x, _ := ctx.NewTensor(formats.F32, 320, 4)
	w, _ := ctx.NewTensor(formats.I8, 320, 8)
	s, _ := ctx.NewTensor(formats.F32, 7)
	for name, f := range map[string]func(){
		"group not dividing":   func() { ctx.QuantizeActivations(x, 256) },
		"group not power of 4": func() { ctx.QuantizeActivations(x, 8) },
		"scale length":         func() { ctx.MulMatI8(w, ctx.QuantizeActivations(x, 0), s, Tensor{}) },
		"f32 activation":       func() { ctx.MulMatI8(w, x, s, Tensor{}) },
	} {
		err := func() (err error) {
			defer Recover(&err)
			f()
			return nil
		}()
		if _, ok := err.(*ShapeError); !ok {
			t.Errorf("%s: %v, want a shape error", name, err)
		}
	}
}

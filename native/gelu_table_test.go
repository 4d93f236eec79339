//go:build cgo

package native

import (
	"math"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// f16 converts f16 bits to float64 (normal and subnormal values).
func f16(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	if e == 0 {
		return sign * m * math.Pow(2, -24)
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

// After a CPU backend starts, ggml's GELU table holds what an FMA build of
// ggml computes: GELU(-1.9990234375) (entry 0xbfff) is -0.045501708984375
// (0xa9d3; a build that rounds a·x·x before adding 1 has 0xa9d2), and
// every other entry of |x| < 10 is, to within one f16 step, the tanh GELU
// of its x in float32 arithmetic with that multiply-add fused, by a Go
// reference (Go's tanh, not the C library's); the graph's GELU reads the
// table.
func TestGELUTableIsFMABuilds(t *testing.T) {
	be, err := NewCPUBackend(1)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	if got := geluTableEntry(0xbfff); got != 0xa9d3 {
		t.Errorf("entry 0xbfff = %#04x, want 0xa9d3", got)
	}
	for i := range 1 << 16 {
		x := f16(uint16(i))
		if math.IsNaN(x) || math.Abs(x) >= 10 || i&0x7c00 == 0x7c00 {
			continue
		}
		xf := float32(x)
		inner := float32(math.FMA(float64(float32(0.044715)*xf), x, 1))
		th := float32(math.Tanh(float64(float32(float32(0.7978845608)*xf) * inner)))
		want := float64(float32(float32(0.5)*xf) * float32(1+th))
		got := f16(geluTableEntry(i))
		step := math.Max(math.Abs(want)*math.Pow(2, -10), math.Pow(2, -24))
		if math.Abs(got-want) > step {
			t.Fatalf("entry %#04x: GELU(%g) = %g, want %g", i, x, got, want)
		}
	}
	ctx, _ := NewContext(4, 4)
	defer ctx.Free()
	x, _ := ctx.NewTensor(formats.F32, 2)
	x.SetInput()
	y := ctx.GELU(x).SetOutput()
	gr := ctx.NewGraph(4)
	gr.Expand(y)
	alloc := be.NewAllocator()
	defer alloc.Free()
	if err := alloc.Alloc(gr); err != nil {
		t.Fatal(err)
	}
	x.SetF32([]float32{-1.9990234375, -1.9992})
	if err := be.Compute(gr); err != nil {
		t.Fatal(err)
	}
	if v, _ := y.F32(); v[0] != -0.045501708984375 || v[1] != -0.045501708984375 {
		t.Errorf("GELU(-1.999) = %v, want -0.045501708984375 twice", v)
	}
}

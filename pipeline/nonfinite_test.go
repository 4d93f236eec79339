package pipeline

import (
	"math"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// TestCountNonFinite: the bit tests agree with decoding every code of each
// float type (quant's decoders are the oracle), and block types are
// counted by decoding.
func TestCountNonFinite(t *testing.T) {
	var s tensor.Scratch
	for _, c := range []struct {
		t     formats.DType
		bytes int
	}{{formats.F16, 2}, {formats.BF16, 2}, {formats.F8_E4M3, 1}, {formats.F8_E5M2, 1}, {formats.F8_E4M3FNUZ, 1}, {formats.F8_E5M2FNUZ, 1}} {
		codes := 1 << (8 * c.bytes)
		b := make([]byte, codes*c.bytes)
		for i := range codes {
			b[i*c.bytes] = byte(i)
			if c.bytes == 2 {
				b[i*2+1] = byte(i >> 8)
			}
		}
		f := make([]float32, codes)
		if err := quant.DecodeFloats(c.t, f, b); err != nil {
			t.Fatalf("%s: %v", c.t, err)
		}
		var want int64
		for _, v := range f {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				want++
			}
		}
		if got := countNonFinite(c.t, b, &s); got != want || want == 0 {
			t.Errorf("%s: counted %d of %d codes, decoding finds %d", c.t, got, codes, want)
		}
	}
	f32 := make([]byte, 0, 16)
	for _, v := range []float64{1, math.Inf(-1), math.NaN(), math.MaxFloat32} {
		f32 = append(f32, byte(math.Float32bits(float32(v))), byte(math.Float32bits(float32(v))>>8),
			byte(math.Float32bits(float32(v))>>16), byte(math.Float32bits(float32(v))>>24))
	}
	if got := countNonFinite(formats.F32, f32, &s); got != 2 {
		t.Errorf("f32: counted %d, want 2", got)
	}
	// q8_0 blocks: a scale of f16 Inf makes the block's 32 values non-finite.
	q := make([]byte, 3*34)
	q[34], q[35] = 0x00, 0x7c // block 1: scale +Inf
	for i := range 32 {
		q[36+i] = 1
	}
	if got := countNonFinite(formats.Q8_0, q, &s); got != 32 {
		t.Errorf("q8_0: counted %d, want 32", got)
	}
}

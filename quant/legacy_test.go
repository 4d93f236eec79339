package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// roundTripRMSE quantizes src with typ (rows of n) and returns the RMS error
// of the decoded values.
func roundTripRMSE(t *testing.T, typ formats.DType, src []float32, n int, weights []float32) float64 {
	t.Helper()
	rb, err := typ.RowBytes(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	q := make([]byte, int(rb)*(len(src)/n))
	if err := QuantizeRows(typ, q, src, n, weights, 2); err != nil {
		t.Fatal(err)
	}
	back := make([]float32, len(src))
	if err := DequantizeRows(typ, back, q, 2); err != nil {
		t.Fatal(err)
	}
	var s float64
	for i := range src {
		d := float64(back[i] - src[i])
		s += d * d
	}
	return math.Sqrt(s / float64(len(src)))
}

func TestRoundTripErrorOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 3))
	const n = 4096
	src := make([]float32, 8*n)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	ones := testWeights(harnessSeed, n)[1].vec
	for _, weights := range [][]float32{nil, ones} {
		order := []formats.DType{formats.F32, formats.F16, formats.Q8_0, formats.Q5_1, formats.Q5_0, formats.Q4_1, formats.Q4_0, formats.TQ1_0}
		prev := -1.0
		for _, typ := range order {
			e := roundTripRMSE(t, typ, src, n, weights)
			if e <= prev && !(typ == formats.F16 && prev == 0) {
				t.Errorf("weights %v: %s error %.5f is not above the previous type's %.5f", weights != nil, typ, e, prev)
			}
			if typ == formats.F32 && e != 0 {
				t.Errorf("f32 round trip error %g", e)
			}
			prev = e
		}
		// Non-linear levels beat the uniform ones at the same size, and
		// ternary packing is lossless between its two layouts.
		if a, b := roundTripRMSE(t, formats.IQ4_NL, src, n, weights), roundTripRMSE(t, formats.Q4_0, src, n, weights); a >= b {
			t.Errorf("iq4_nl error %.5f not below q4_0's %.5f", a, b)
		}
		if a, b := roundTripRMSE(t, formats.TQ1_0, src, n, weights), roundTripRMSE(t, formats.TQ2_0, src, n, weights); a != b {
			t.Errorf("tq1_0 error %.6f differs from tq2_0's %.6f", a, b)
		}
		if e := roundTripRMSE(t, formats.MXFP4, src, n, weights); e > 0.2 || e < 0.01 {
			t.Errorf("mxfp4 error %.5f out of the expected range", e)
		}
	}
	// With importance weights the weighted error at the emphasised columns
	// should not be worse than without (q4_0: weights favour the first half).
	w := make([]float32, n)
	for i := range w {
		w[i] = 1e-3
		if i%64 < 8 {
			w[i] = 100
		}
	}
	focus := func(typ formats.DType, weights []float32) float64 {
		rb, _ := typ.RowBytes(n)
		q := make([]byte, int(rb)*8)
		if err := QuantizeRows(typ, q, src, n, weights, 1); err != nil {
			t.Fatal(err)
		}
		back := make([]float32, len(src))
		if err := DequantizeRows(typ, back, q, 1); err != nil {
			t.Fatal(err)
		}
		var s float64
		for i := range src {
			if i%n%64 < 8 {
				d := float64(back[i] - src[i])
				s += d * d
			}
		}
		return s
	}
	for _, typ := range []formats.DType{formats.Q4_0, formats.Q4_1, formats.Q5_0, formats.Q5_1, formats.IQ4_NL} {
		if a, b := focus(typ, w), focus(typ, nil); a >= b {
			t.Errorf("%s: weighted error on emphasised columns %.4f not below unweighted %.4f", typ, a, b)
		}
	}
}

// TestExactRoundTrips quantizes values that lie exactly on each format's
// grid (with a power-of-two scale, so every step is exact) and expects them
// back unchanged.
func TestExactRoundTrips(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 4))
	// grid fills four blocks with levels times a power-of-two scale
	// 2^lo..2^hi chosen per block.
	grid := func(block, lo, hi int, level func(i int) float32) []float32 {
		out := make([]float32, 4*block)
		for b := 0; b < len(out); b += block {
			scale := float32(math.Ldexp(1, lo+r.IntN(hi-lo+1)))
			for i := range block {
				out[b+i] = level(i) * scale
			}
		}
		return out
	}
	cases := []struct {
		typ formats.DType
		x   []float32
	}{
		// Levels -127..127 with the extreme present.
		{formats.Q8_0, grid(32, -10, 9, func(i int) float32 {
			if i == 5 {
				return -127
			}
			return float32(r.IntN(255) - 127)
		})},
		// Levels -8..7 with -8 present (it sets the scale).
		{formats.Q4_0, grid(32, -10, 9, func(i int) float32 {
			if i == 3 {
				return -8
			}
			return float32(r.IntN(16) - 8)
		})},
		{formats.Q5_0, grid(32, -10, 9, func(i int) float32 {
			if i == 3 {
				return -16
			}
			return float32(r.IntN(32) - 16)
		})},
		// Offset grids with both ends present.
		{formats.Q4_1, grid(32, -10, 9, func(i int) float32 { return float32(i%16) - 4 })},
		{formats.Q5_1, grid(32, -10, 9, func(i int) float32 { return float32(i) - 7 })},
		{formats.IQ4_NL, grid(32, -10, 9, func(i int) float32 {
			if i == 0 {
				return -127
			}
			return float32(iq4nlValues[r.IntN(16)])
		})},
		{formats.MXFP4, grid(32, -10, 9, func(i int) float32 {
			if i == 0 {
				return 12
			}
			return float32(mxfp4Values[r.IntN(16)])
		})},
		{formats.TQ1_0, grid(256, -10, 9, func(i int) float32 { return float32(i%3 - 1) })},
		{formats.TQ2_0, grid(256, -10, 9, func(i int) float32 { return float32((i*7)%3 - 1) })},
		{formats.F16, grid(1, -24, 4, func(int) float32 { return float32(r.IntN(2048)) })},
		{formats.BF16, grid(1, -133, 119, func(int) float32 { return float32(r.IntN(256)) })},
		{formats.F8_E4M3, grid(1, -9, 4, func(int) float32 { return float32(r.IntN(16)) })},
		{formats.F8_E5M2, grid(1, -16, 13, func(int) float32 { return float32(r.IntN(8)) })},
	}
	for _, c := range cases {
		for _, weights := range [][]float32{nil, testWeights(harnessSeed, len(c.x))[1].vec} {
			if e := roundTripRMSE(t, c.typ, c.x, len(c.x), weights); e != 0 {
				t.Errorf("%s (weights %v): grid values came back with RMS error %g", c.typ, weights != nil, e)
			}
		}
	}
}

func TestDequantizeQ8_1AndQ8_K(t *testing.T) {
	// q8_1: d = 0.5 (f16 0x3800), s ignored, then 32 int8.
	b1 := make([]byte, 36)
	binary.LittleEndian.PutUint16(b1[0:], 0x3800)
	binary.LittleEndian.PutUint16(b1[2:], 0x7c00) // an Inf sum must not matter
	for i := range 32 {
		b1[4+i] = byte(int8(i - 16))
	}
	got := make([]float32, 32)
	if err := DecodeFloats(formats.Q8_1, got, b1); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if want := float32(i-16) * 0.5; v != want {
			t.Fatalf("q8_1 element %d: %g, want %g", i, v, want)
		}
	}
	// q8_K: f32 d, 256 int8, 16 int16 sums (ignored).
	bk := make([]byte, 292)
	binary.LittleEndian.PutUint32(bk[0:], math.Float32bits(-0.1))
	for i := range 256 {
		bk[4+i] = byte(int8(i))
	}
	gotK := make([]float32, 256)
	if err := DecodeFloats(formats.Q8_K, gotK, bk); err != nil {
		t.Fatal(err)
	}
	for i, v := range gotK {
		if want := float32(-0.1) * float32(int8(i)); v != want {
			t.Fatalf("q8_K element %d: %g, want %g", i, v, want)
		}
	}
}

func TestCHelpers(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		name      string
		got, want int32
	}{
		{"cvtt 2.9", cCvtt(2.9), 2}, {"cvtt -2.9", cCvtt(-2.9), -2}, {"cvtt NaN", cCvtt(nan), math.MinInt32},
		{"cvtt Inf", cCvtt(inf), math.MinInt32}, {"cvtt 2^31", cCvtt(0x1p31), math.MinInt32},
		{"roundf 2.5", cRoundf(2.5), 3}, {"roundf -2.5", cRoundf(-2.5), -3}, {"roundf 0.49999997", cRoundf(0.49999997), 0},
		{"roundf NaN", cRoundf(nan), math.MinInt32}, {"lroundf NaN", cLroundf(nan), 0}, {"lroundf -1.5", cLroundf(-1.5), -2},
		{"lroundf 2^40+1", cLroundf(0x1p40), 0}, {"nearest 2.5", cNearestInt(2.5), 2}, {"nearest 3.5", cNearestInt(3.5), 4},
		{"nearest -0.5", cNearestInt(-0.5), 0}, {"nearest -1.5", cNearestInt(-1.5), -2},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, c.got, c.want)
		}
	}
}

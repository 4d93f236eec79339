package convrot

import (
	"math"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func TestFP8Scale(t *testing.T) {
	for _, c := range []struct {
		t    formats.DType
		amax float32
		want float32
	}{
		{formats.F8_E4M3, 448, 1},
		{formats.F8_E4M3, 896, 2},
		{formats.F8_E4M3, 1, float32(1) / 448},
		{formats.F8_E5M2, 57344, 1},
		{formats.F8_E5M2, 28672, 0.5},
		{formats.F8_E4M3, 0, MinScale},
		{formats.F8_E5M2, 1e-35, MinScale},
	} {
		f, err := NewFP8(c.t, c.amax)
		if err != nil {
			t.Fatal(err)
		}
		if f.Scale != c.want {
			t.Errorf("NewFP8(%s, %v).Scale = %v, want %v", c.t, c.amax, f.Scale, c.want)
		}
	}
	for _, bad := range []float32{-1, float32(math.NaN()), float32(math.Inf(1))} {
		if _, err := NewFP8(formats.F8_E4M3, bad); err == nil {
			t.Errorf("NewFP8(amax=%v) succeeded", bad)
		}
	}
	if _, err := NewFP8(formats.I8, 1); err == nil {
		t.Error("NewFP8(i8) succeeded")
	}
}

// TestFP8KnownCodes checks codes worked out from the bit layouts: e4m3fn is
// s.eeee.mmm with bias 7 (1.0 = 0x38, 0.5 = 0x30, 448 = 0x7E), e5m2 is
// s.eeeee.mm with bias 15 (1.0 = 0x3C).
func TestFP8KnownCodes(t *testing.T) {
	f, _ := NewFP8(formats.F8_E4M3, 448) // scale 1
	src := []float32{448, -448, 1, 0.5, 0, 1.0625, 1.1875, 1000}
	// 1.0625 is halfway between 1 and 1.125: ties to even gives 1 (0x38);
	// 1.1875 is halfway between 1.125 and 1.25: gives 1.25 (0x3A). 1000
	// (beyond the range, as a rounding of amax/scale could be) saturates.
	want := []byte{0x7E, 0xFE, 0x38, 0x30, 0x00, 0x38, 0x3A, 0x7E}
	got := make([]byte, len(src))
	if err := f.Encode(got, src); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("e4m3 code of %v = %#x, want %#x", src[i], got[i], want[i])
		}
	}
	g, _ := NewFP8(formats.F8_E5M2, 57344)
	src = []float32{1, -2, 57344, 1e9}
	want = []byte{0x3C, 0xC0, 0x7B, 0x7B}
	got = make([]byte, len(src))
	if err := g.Encode(got, src); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("e5m2 code of %v = %#x, want %#x", src[i], got[i], want[i])
		}
	}
}

// TestFP8RoundTrip: decode(encode(w)) is within half an FP8 step of w, and
// the largest magnitude maps to the format's largest value and back.
func TestFP8RoundTrip(t *testing.T) {
	w := gaussianWithOutliers(8, 512, 3, 40)
	amax, err := AbsMax(w)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		t        formats.DType
		mantissa int
		subHalf  int // log2 of half the smallest subnormal
	}{{formats.F8_E4M3, 3, -10}, {formats.F8_E5M2, 2, -17}} {
		f, err := NewFP8(c.t, amax)
		if err != nil {
			t.Fatal(err)
		}
		codes := make([]byte, len(w))
		if err := f.Encode(codes, w); err != nil {
			t.Fatal(err)
		}
		back := make([]float32, len(w))
		if err := f.Decode(back, codes); err != nil {
			t.Fatal(err)
		}
		for i, v := range w {
			// Half a step is 2^-(mantissa+1) relative for normals, and half
			// the smallest subnormal (times the scale) in the subnormal range.
			tol := math.Abs(float64(v))*math.Ldexp(1, -c.mantissa-1) + float64(f.Scale)*math.Ldexp(1, c.subHalf)
			if d := math.Abs(float64(back[i]) - float64(v)); d > tol*(1+1e-6) {
				t.Fatalf("%s: %v came back as %v (error %g > %g)", c.t, v, back[i], d, tol)
			}
			if math.Abs(float64(v)) == float64(amax) && math.Abs(float64(back[i])-float64(v)) > 1e-6*float64(amax) {
				t.Fatalf("%s: amax %v came back as %v", c.t, v, back[i])
			}
		}
	}
}

func TestFP8ZeroTensor(t *testing.T) {
	w := make([]float32, 16)
	amax, _ := AbsMax(w)
	f, err := NewFP8(formats.F8_E4M3, amax)
	if err != nil {
		t.Fatal(err)
	}
	codes := make([]byte, 16)
	if err := f.Encode(codes, w); err != nil {
		t.Fatal(err)
	}
	back := make([]float32, 16)
	if err := f.Decode(back, codes); err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if codes[i] != 0 || math.Float32bits(back[i]) != 0 {
			t.Fatalf("zero tensor: code %#x value %v at %d", codes[i], back[i], i)
		}
	}
}

func TestFP8Errors(t *testing.T) {
	if _, err := AbsMax([]float32{1, float32(math.NaN())}); err == nil {
		t.Error("AbsMax with a NaN succeeded")
	}
	f, _ := NewFP8(formats.F8_E4M3, 1)
	if err := f.Encode(make([]byte, 1), []float32{float32(math.Inf(1))}); err == nil {
		t.Error("Encode of +Inf succeeded")
	}
	if err := f.Encode(make([]byte, 2), []float32{1}); err == nil {
		t.Error("Encode with mismatched lengths succeeded")
	}
	if err := f.Decode(make([]float32, 2), []byte{1}); err == nil {
		t.Error("Decode with mismatched lengths succeeded")
	}
	bad := FP8{Type: formats.F16, Scale: 1}
	if err := bad.Encode(make([]byte, 1), []float32{1}); err == nil {
		t.Error("Encode as f16 succeeded")
	}
}

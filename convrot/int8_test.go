package convrot

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats/comfyquant"
)

// TestInt8HandChecked quantizes a 2x8 matrix with G=4 whose rotated values
// were chosen so that every scale is exact and several codes are ties.
//
// In the rotated domain the rows are
//
//	row 0: [127, 2.5, -3.5, 0.5 | 1.5, -0.5, 10, -127]      amax 127  -> s = 1
//	row 1: [63.5, 0.25, -0.75, 0 | 1, 0, -63.5, 31.75]      amax 63.5 -> s = 0.5
//
// and W is H4 applied to each group (H4 is its own inverse). For the group
// (a,b,c,d) = (127, 2.5, -3.5, 0.5): h = (a+b+c+d)/2 = 63.25 and
// W = (h-d, h-c, h-b, h-a) = (62.75, 66.75, 60.75, -63.75); the other groups
// are worked out the same way below. Codes are round-half-even(v/s):
//
//	row 0: 127, 2 (2.5), -4 (-3.5), 0 (0.5), 2 (1.5), 0 (-0.5), 10, -127
//	row 1: 127, 0 (0.5), -2 (-1.5), 0, 2, 0, -127, 64 (63.5)
func TestInt8HandChecked(t *testing.T) {
	w := []float32{
		62.75, 66.75, 60.75, -63.75, // h = 63.25
		69, -68, -57.5, -59.5, // (1.5, -0.5, 10, -127): h = -58
		31.5, 32.25, 31.25, -32, // (63.5, 0.25, -0.75, 0): h = 31.5
		-47.125, 48.125, -15.375, -16.375, // (1, 0, -63.5, 31.75): h = -15.375
	}
	wantRot := []float32{127, 2.5, -3.5, 0.5, 1.5, -0.5, 10, -127, 63.5, 0.25, -0.75, 0, 1, 0, -63.5, 31.75}
	wantCodes := []int8{127, 2, -4, 0, 2, 0, 10, -127, 127, 0, -2, 0, 2, 0, -127, 64}
	wantScales := []float32{1, 0.5}

	q, err := NewInt8Rows(8, 4)
	if err != nil {
		t.Fatal(err)
	}
	rows := append([]float32(nil), w...)
	codes := make([]byte, 16)
	scales := make([]float32, 2)
	if err := q.Quantize(codes, scales, rows); err != nil {
		t.Fatal(err)
	}
	for i := range wantRot {
		if rows[i] != wantRot[i] {
			t.Errorf("rotated[%d] = %v, want %v", i, rows[i], wantRot[i])
		}
		if int8(codes[i]) != wantCodes[i] {
			t.Errorf("code[%d] = %d, want %d", i, int8(codes[i]), wantCodes[i])
		}
	}
	for i := range wantScales {
		if scales[i] != wantScales[i] {
			t.Errorf("scale[%d] = %v, want %v", i, scales[i], wantScales[i])
		}
	}
	// Dequantizing is codes·s, rotated back: every value here is dyadic, so
	// the result is exact and equals H4 applied to the codes·s.
	deq := make([]float32, 16)
	if err := q.Dequantize(deq, codes, scales); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, 16)
	for i, c := range wantCodes {
		want[i] = float32(c) * wantScales[i/8]
	}
	_ = Rotate(want, 4)
	for i := range want {
		if deq[i] != want[i] {
			t.Errorf("dequantized[%d] = %v, want %v", i, deq[i], want[i])
		}
	}
	// Row 0, first group: codes (127, 2, -4, 0) -> h = 62.5 -> (62.5, 66.5, 60.5, -64.5).
	if deq[0] != 62.5 || deq[1] != 66.5 || deq[2] != 60.5 || deq[3] != -64.5 {
		t.Errorf("dequantized row 0 group 0 = %v, want [62.5 66.5 60.5 -64.5]", deq[:4])
	}
}

// TestInt8PlainHandChecked is per-row INT8 without rotation.
func TestInt8PlainHandChecked(t *testing.T) {
	q, err := NewInt8Rows(4, 0)
	if err != nil {
		t.Fatal(err)
	}
	rows := []float32{-254, 1, 3, 5, 63.5, -0.25, 0.75, 0}
	codes := make([]byte, 8)
	scales := make([]float32, 2)
	if err := q.Quantize(codes, scales, rows); err != nil {
		t.Fatal(err)
	}
	// Row 0: s = 2, codes -127, 0 (0.5), 2 (1.5), 2 (2.5).
	// Row 1: s = 0.5, codes 127, 0 (-0.5), 2 (1.5), 0.
	want := []int8{-127, 0, 2, 2, 127, 0, 2, 0}
	for i := range want {
		if int8(codes[i]) != want[i] {
			t.Errorf("code[%d] = %d, want %d", i, int8(codes[i]), want[i])
		}
	}
	if scales[0] != 2 || scales[1] != 0.5 {
		t.Errorf("scales = %v, want [2 0.5]", scales)
	}
	if rows[0] != -254 || rows[3] != 5 {
		t.Errorf("plain quantization changed its input: %v", rows)
	}
}

// TestInt8ZeroRows: a zero row must not divide by zero, gets scale 1e-30 and
// codes 0, and dequantizes to exact +0 values, with and without rotation.
func TestInt8ZeroRows(t *testing.T) {
	for _, g := range []int{0, 4, 16} {
		q, err := NewInt8Rows(16, g)
		if err != nil {
			t.Fatal(err)
		}
		rows := make([]float32, 48)
		for i := 16; i < 32; i++ {
			rows[i] = float32(i) - 20 // only the middle row is not zero
		}
		codes := make([]byte, 48)
		scales := make([]float32, 3)
		if err := q.Quantize(codes, scales, rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range []int{0, 2} {
			if scales[r] != MinScale {
				t.Errorf("G=%d: zero row %d has scale %v, want %v", g, r, scales[r], float32(MinScale))
			}
			for _, c := range codes[r*16 : (r+1)*16] {
				if c != 0 {
					t.Fatalf("G=%d: zero row %d has code %d", g, r, int8(c))
				}
			}
		}
		deq := make([]float32, 48)
		if err := q.Dequantize(deq, codes, scales); err != nil {
			t.Fatal(err)
		}
		for _, r := range []int{0, 2} {
			for i, v := range deq[r*16 : (r+1)*16] {
				if math.Float32bits(v) != 0 {
					t.Fatalf("G=%d: zero row %d dequantized to %v at %d", g, r, v, i)
				}
			}
		}
	}
	// A row of tiny values (amax/127 below the floor) also ends up all zero.
	q, _ := NewInt8Rows(4, 0)
	codes, scales := make([]byte, 4), make([]float32, 1)
	if err := q.Quantize(codes, scales, []float32{1e-35, -1e-36, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if scales[0] != MinScale || codes[0] != 0 || codes[1] != 0 {
		t.Errorf("tiny row: scale %v codes %v", scales[0], codes)
	}
}

// TestInt8RoundTripBound checks dequantize(quantize(W)) against the bound
// that follows from the format. In the rotated domain every element is
// within s/2 of q·s (rounding to the nearest code, no clamping since
// |v/s| <= 127). H is orthogonal, so the error of a row in the original
// domain has the same 2-norm: ||W - deq||_2 <= sqrt(in)·s/2, plus the
// float32 rounding of the two rotations (a relative 1e-6 of the row norm is
// far more than they can add).
func TestInt8RoundTripBound(t *testing.T) {
	const rows, in = 16, 1024
	w := gaussianWithOutliers(rows, in, 11, 40)
	for _, g := range []int{0, 4, 16, 64, 256, 1024} {
		q, err := NewInt8Rows(in, g)
		if err != nil {
			t.Fatal(err)
		}
		rot := append([]float32(nil), w...)
		codes := make([]byte, rows*in)
		scales := make([]float32, rows)
		if err := q.Quantize(codes, scales, rot); err != nil {
			t.Fatal(err)
		}
		deq := make([]float32, rows*in)
		if err := q.Dequantize(deq, codes, scales); err != nil {
			t.Fatal(err)
		}
		for r := 0; r < rows; r++ {
			s := float64(scales[r])
			for i := r * in; i < (r+1)*in; i++ {
				// rot holds the rotated weights after Quantize.
				if d := math.Abs(float64(rot[i]) - float64(int8(codes[i]))*s); d > s/2*(1+1e-6) {
					t.Fatalf("G=%d row %d col %d: rotated error %g > s/2 = %g", g, r, i-r*in, d, s/2)
				}
			}
			var e2 float64
			for i := r * in; i < (r+1)*in; i++ {
				d := float64(w[i]) - float64(deq[i])
				e2 += d * d
			}
			bound := math.Sqrt(in)*s/2 + 1e-6*norm2(w[r*in:(r+1)*in])
			if math.Sqrt(e2) > bound {
				t.Fatalf("G=%d row %d: ||W - deq|| = %g > bound %g", g, r, math.Sqrt(e2), bound)
			}
		}
	}
}

// TestInt8ScalesMatchQuantize: Scales alone gives the scales Quantize writes.
func TestInt8ScalesMatchQuantize(t *testing.T) {
	const rows, in = 4, 256
	w := gaussianWithOutliers(rows, in, 5, 40)
	q, _ := NewInt8Rows(in, 64)
	a, b := append([]float32(nil), w...), append([]float32(nil), w...)
	s1, s2 := make([]float32, rows), make([]float32, rows)
	if err := q.Quantize(make([]byte, rows*in), s1, a); err != nil {
		t.Fatal(err)
	}
	if err := q.Scales(s2, b); err != nil {
		t.Fatal(err)
	}
	for i := range s1 {
		if s1[i] != s2[i] {
			t.Errorf("row %d: Quantize scale %v, Scales %v", i, s1[i], s2[i])
		}
	}
	sb := make([]byte, 4*rows)
	if err := q.ScaleBytes(sb, append([]float32(nil), w...)); err != nil {
		t.Fatal(err)
	}
	if string(sb) != string(PutScales(nil, s1)) {
		t.Error("ScaleBytes differs from PutScales(Quantize's scales)")
	}
	if err := q.ScaleBytes(sb[:4], append([]float32(nil), w...)); err == nil {
		t.Error("ScaleBytes with a short buffer succeeded")
	}
	// Codes alone (nil scales) are the same codes.
	c1, c2 := make([]byte, rows*in), make([]byte, rows*in)
	if err := q.Quantize(c1, s1, append([]float32(nil), w...)); err != nil {
		t.Fatal(err)
	}
	if err := q.Quantize(c2, nil, append([]float32(nil), w...)); err != nil {
		t.Fatal(err)
	}
	if string(c1) != string(c2) {
		t.Error("Quantize with nil scales gives other codes")
	}
}

func TestInt8Errors(t *testing.T) {
	for _, c := range []struct{ in, g int }{{0, 0}, {-1, 0}, {320, 256}, {512, 512}, {12, 8}} {
		if _, err := NewInt8Rows(c.in, c.g); err == nil {
			t.Errorf("NewInt8Rows(%d, %d) succeeded", c.in, c.g)
		}
	}
	q, _ := NewInt8Rows(4, 4)
	if err := q.Quantize(make([]byte, 8), make([]float32, 1), make([]float32, 8)); err == nil {
		t.Error("Quantize with one scale for two rows succeeded")
	}
	if err := q.Quantize(make([]byte, 6), make([]float32, 1), make([]float32, 6)); err == nil {
		t.Error("Quantize of a partial row succeeded")
	}
	if err := q.Dequantize(make([]float32, 4), make([]byte, 3), make([]float32, 1)); err == nil {
		t.Error("Dequantize with a short code buffer succeeded")
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		err := q.Quantize(make([]byte, 8), make([]float32, 2), []float32{1, 2, 3, 4, 0, bad, 0, 0})
		if err == nil || !strings.Contains(err.Error(), "row 1") {
			t.Errorf("Quantize with %v = %v, want an error naming row 1", bad, err)
		}
	}
	// Finite values whose rotation overflows float32 are refused too.
	big := float32(math.MaxFloat32)
	if err := q.Quantize(make([]byte, 4), make([]float32, 1), []float32{big, big, big, -big}); err == nil {
		t.Error("Quantize of a row whose rotation overflows succeeded")
	}
	var zero Int8Rows
	if err := zero.Quantize(nil, nil, nil); err == nil {
		t.Error("Quantize on the zero Int8Rows succeeded")
	}
}

// TestConvrotBeatsPlainInt8 is the measured benefit: on Gaussian weights
// with outlier input columns, rotating spreads each outlier over its group,
// so the per-row scale shrinks and the reconstruction error falls.
func TestConvrotBeatsPlainInt8(t *testing.T) {
	const rows, in = 64, 3072
	w := gaussianWithOutliers(rows, in, 2026, 40)
	plain := reconstructionError(t, w, rows, in, 0)
	rot := reconstructionError(t, w, rows, in, comfyquant.DefaultGroupSize)
	factor := plain / rot
	t.Logf("relative Frobenius error: int8 %.4g, int8_convrot (G=256) %.4g: convrot is %.2fx lower", plain, rot, factor)
	if factor < 2 {
		t.Errorf("convrot error %g is not at least 2x below plain int8 %g", rot, plain)
	}
	// Without outliers the rotation must not hurt much either.
	g := gaussianWithOutliers(rows, in, 1, 1)
	p2, r2 := reconstructionError(t, g, rows, in, 0), reconstructionError(t, g, rows, in, comfyquant.DefaultGroupSize)
	t.Logf("without outliers: int8 %.4g, int8_convrot %.4g", p2, r2)
	if r2 > 1.05*p2 {
		t.Errorf("without outliers convrot error %g is far above plain %g", r2, p2)
	}
}

// reconstructionError returns ||W - deq(quant(W))||_F / ||W||_F.
func reconstructionError(t testing.TB, w []float32, rows, in, g int) float64 {
	q, err := NewInt8Rows(in, g)
	if err != nil {
		t.Fatal(err)
	}
	work := append([]float32(nil), w...)
	codes := make([]byte, rows*in)
	scales := make([]float32, rows)
	if err := q.Quantize(codes, scales, work); err != nil {
		t.Fatal(err)
	}
	if err := q.Dequantize(work, codes, scales); err != nil {
		t.Fatal(err)
	}
	var e, n float64
	for i := range w {
		d := float64(w[i]) - float64(work[i])
		e += d * d
		n += float64(w[i]) * float64(w[i])
	}
	return math.Sqrt(e / n)
}

// TestEncodeInt8MatchesRoundToEven checks the float32 rounding trick of the
// encoder against math.RoundToEven on random quotients and on exact ties.
func TestEncodeInt8MatchesRoundToEven(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	row := make([]float32, 4096)
	for i := range row {
		switch i % 4 {
		case 0:
			row[i] = float32(rng.IntN(255)-127) + 0.5 // exact ties (scale 1)
		case 1:
			row[i] = float32(rng.NormFloat64() * 40)
		case 2:
			row[i] = float32(rng.IntN(255) - 127) // exact integers
		default:
			row[i] = float32((rng.Float64()*2 - 1) * 127.4)
		}
	}
	for _, s := range []float32{1, 0.5, 3, float32(1) / 3, 1e-20} {
		x := make([]float32, len(row))
		for i, v := range row {
			x[i] = v * s // quotients x/s stay within ±127.5
		}
		codes := make([]byte, len(x))
		encodeInt8(codes, x, s)
		for i, v := range x {
			want := math.Max(-127, math.Min(127, math.RoundToEven(float64(v/s))))
			if int8(codes[i]) != int8(want) {
				t.Fatalf("s=%v: code of %v/%v = %d, want %v", s, v, s, int8(codes[i]), want)
			}
		}
	}
}

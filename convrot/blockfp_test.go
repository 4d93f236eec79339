package convrot

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/quant"
)

// TestFP4CodeNearestEven checks fp4Code against a brute-force search of the
// eight magnitudes (nearest, the even code on a tie) on a fine grid that
// holds every midpoint, plus the sign of values that round to zero.
func TestFP4CodeNearestEven(t *testing.T) {
	for i := 0; i <= 7*64; i++ {
		x := float32(i) / 64
		best := 0
		for c := 1; c < 8; c++ {
			d, db := abs32(x-fp4Values[c]), abs32(x-fp4Values[best])
			if d < db || d == db && c%2 == 0 {
				best = c
			}
		}
		if got := fp4Code(x); int(got) != best {
			t.Fatalf("fp4Code(%v) = %d, want %d", x, got, best)
		}
		if got := fp4Code(-x); int(got) != best|8 {
			t.Fatalf("fp4Code(%v) = %d, want %d", -x, got, best|8)
		}
	}
	if fp4Code(float32(math.Copysign(0, -1))) != 8 || fp4Code(-0.1) != 8 {
		t.Error("negative values that round to zero lose their sign")
	}
}

// toBlocked is the cuBLAS block-scale layout written out step by step from
// its definition (tiles of 128x4, each stored as 32 rows of 16: row r =
// 32i+j of the tile, column k, at j*16 + i*4 + k), independent of
// SwizzleIndex's closed form.
func toBlocked(m [][]byte, rows, cols int) []byte {
	pr, pc := (rows+127)/128*128, (cols+3)/4*4
	out := make([]byte, 0, pr*pc)
	for tr := 0; tr < pr/128; tr++ {
		for tc := 0; tc < pc/4; tc++ {
			for j := 0; j < 32; j++ {
				for i := 0; i < 4; i++ {
					for k := 0; k < 4; k++ {
						r, c := tr*128+i*32+j, tc*4+k
						var v byte
						if r < rows && c < cols {
							v = m[r][c]
						}
						out = append(out, v)
					}
				}
			}
		}
	}
	return out
}

func TestSwizzleIndex(t *testing.T) {
	for _, sz := range [][2]int{{1, 1}, {128, 4}, {130, 5}, {300, 24}} {
		rows, cols := sz[0], sz[1]
		m := make([][]byte, rows)
		for r := range m {
			m[r] = make([]byte, cols)
			for c := range m[r] {
				m[r][c] = byte(1 + (r*7+c*13)%250)
			}
		}
		want := toBlocked(m, rows, cols)
		shape := SwizzledScaleShape(int64(rows), int64(cols))
		if int64(len(want)) != shape[0]*shape[1] {
			t.Fatalf("%v: %d stored scales, shape %v", sz, len(want), shape)
		}
		for r := range rows {
			for c := range cols {
				if got := want[SwizzleIndex(int64(r), int64(c), shape[1])]; got != m[r][c] {
					t.Fatalf("%v: scale (%d, %d) at the wrong place", sz, r, c)
				}
			}
		}
	}
}

// gaussianRow returns n Gaussian values with a few large outliers.
func gaussianRow(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
		if r.IntN(64) == 0 {
			x[i] *= 20
		}
	}
	return x
}

// TestNVFP4RoundTrip: values that are an E2M1 grid times a representable
// block scale come back exactly; Gaussian rows come back within half a
// step of their block; an imatrix never makes the weighted error worse.
func TestNVFP4RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// A block holding 6 (its max) and grid values at scale 0.25.
	row := make([]float32, 32)
	for i := range row {
		row[i] = FP4Value(byte(i%16)) * 0.25
	}
	row[5] = 6 * 0.25
	ts := float32(1.0 / 64)
	codes, scales, back := make([]byte, 16), make([]byte, 2), make([]float32, 32)
	if err := EncodeNVFP4Row(codes, scales, row, ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := DecodeNVFP4Row(back, codes, scales, ts); err != nil {
		t.Fatal(err)
	}
	for i := range row {
		if back[i] != row[i] {
			t.Fatalf("grid value %d: %v back as %v", i, row[i], back[i])
		}
	}
	if codes[0]>>4 != 0 || codes[0]&15 != 1 {
		t.Errorf("first byte %#x: the first value must be the high nibble", codes[0])
	}

	x := gaussianRow(r, 4096)
	amax, _ := AbsMax(x)
	ts = NVFP4TensorScale(amax)
	codes, scales, back = make([]byte, 2048), make([]byte, 256), make([]float32, 4096)
	if err := EncodeNVFP4Row(codes, scales, x, ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := DecodeNVFP4Row(back, codes, scales, ts); err != nil {
		t.Fatal(err)
	}
	w := make([]float32, len(x))
	for i := range w {
		w[i] = float32(1 + r.IntN(100))
	}
	var plain, weighted float64
	for b := 0; b < 256; b++ {
		total := ts * quant.F8E4M3ToF32(scales[b])
		for j := b * 16; j < b*16+16; j++ {
			// The largest step of E2M1 is 2 (between 4 and 6).
			if d := abs32(x[j] - back[j]); d > total+1e-6 {
				t.Fatalf("value %d: %v back as %v, more than half a step (%v)", j, x[j], back[j], total)
			}
			d := float64(x[j] - back[j])
			plain += float64(w[j]) * d * d
		}
	}
	if err := EncodeNVFP4Row(codes, scales, x, ts, w); err != nil {
		t.Fatal(err)
	}
	_ = DecodeNVFP4Row(back, codes, scales, ts)
	for j := range x {
		d := float64(x[j] - back[j])
		weighted += float64(w[j]) * d * d
	}
	if weighted > plain {
		t.Errorf("imatrix-weighted scales: weighted error %g > %g without", weighted, plain)
	}
}

// TestMXFP8RoundTrip: the block scale is the smallest power of two that
// keeps the block's largest value within 448, and decoding multiplies by it.
func TestMXFP8RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := gaussianRow(r, 1024)
	x[0] = 448 * 0x1p-3 // a block whose max is exactly 448·2^-3
	codes, scales, back := make([]byte, 1024), make([]byte, 32), make([]float32, 1024)
	if err := EncodeMXFP8Row(codes, scales, x, nil); err != nil {
		t.Fatal(err)
	}
	if err := DecodeMXFP8Row(back, codes, scales); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < 32; b++ {
		amax, _ := AbsMax(x[b*32 : b*32+32])
		s := E8M0Value(scales[b])
		if amax/s > 448 || amax/(s/2) <= 448 {
			t.Fatalf("block %d: amax %v, scale %v is not the smallest power of two fitting 448", b, amax, s)
		}
		for j := b * 32; j < b*32+32; j++ {
			if want := quant.F8E4M3ToF32(quant.F32ToF8E4M3(x[j]/s)) * s; back[j] != want {
				t.Fatalf("value %d: %v back as %v, want %v", j, x[j], back[j], want)
			}
		}
	}
	if scales[0] != 127-3 {
		t.Errorf("block 0 scale code %d, want %d (2^-3)", scales[0], 127-3)
	}
	zero := make([]float32, 32)
	if err := EncodeMXFP8Row(codes[:32], scales[:1], zero, nil); err != nil || scales[0] != 0 {
		t.Errorf("zero block: scale %d, %v", scales[0], err)
	}
	if E8M0Value(0) != 0 || E8M0Value(127) != 1 || !math.IsInf(float64(E8M0Value(255)), 1) {
		t.Error("E8M0Value: 0 must decode to 0, 127 to 1 and 255 to +Inf, as ComfyUI's kitchen decodes them")
	}
}

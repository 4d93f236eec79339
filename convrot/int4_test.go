package convrot

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/quant"
)

// TestW4A4RoundTrip: the packing puts the even column in the low nibble,
// codes stay in [-7, 7], and the decoded row is within half a step per
// value of the original in the rotated basis, so within s/2·√n overall
// (the rotation is orthonormal).
func TestW4A4RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, g := range []int{16, 64, 256} {
		x := gaussianRow(r, 512)
		orig := slices.Clone(x)
		codes := make([]byte, 256)
		s, err := EncodeW4A4Row(codes, x, g)
		if err != nil {
			t.Fatal(err)
		}
		rot := slices.Clone(orig)
		_ = Rotate(rot, g)
		amax, _ := AbsMax(rot)
		if s != amax/7 {
			t.Errorf("G=%d: scale %v, want amax/7 = %v", g, s, amax/7)
		}
		for i, c := range codes {
			lo, hi := signed4(c&15), signed4(c>>4)
			if lo < -7 || hi < -7 {
				t.Fatalf("code -8 written")
			}
			if want := round32(rot[2*i] / s); float32(lo) != want {
				t.Fatalf("G=%d: even column %d in the low nibble is %d, want %v", g, 2*i, lo, want)
			}
		}
		back := make([]float32, 512)
		if err := DecodeW4A4Row(back, codes, s, g); err != nil {
			t.Fatal(err)
		}
		// The widened codes generate multiplies are the same weight.
		wide, viaWide := make([]byte, 512), make([]float32, 512)
		W4A4Int8Row(wide, codes)
		for i, c := range wide {
			viaWide[i] = float32(int8(c)) * s
		}
		_ = Rotate(viaWide, g)
		if !slices.Equal(viaWide, back) {
			t.Fatalf("G=%d: the widened codes times the scale are not the decoded row", g)
		}
		var e float64
		for i := range back {
			e += float64(back[i]-orig[i]) * float64(back[i]-orig[i])
		}
		if bound := float64(s) / 2 * math.Sqrt(512) * 1.001; math.Sqrt(e) > bound {
			t.Errorf("G=%d: error %g above %g", g, math.Sqrt(e), bound)
		}
	}
	if _, err := EncodeW4A4Row(make([]byte, 48), make([]float32, 96), 16); err == nil {
		t.Error("a row of 96 (not a multiple of 64) was accepted")
	}
}

// TestW4A8 checks the codebook choice and the final assignment: every
// value's decoded INT8 level is the nearest of its group's levels to
// x/channel scale, the channel scale maps the largest decoded magnitude to
// at most 127, and the decoded row is close to the original.
func TestW4A8(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const rows, in = 8, 512
	w := make([]float32, rows*in)
	for i := range w {
		w[i] = float32(r.NormFloat64()) * float32(1+i/in)
	}
	orig := slices.Clone(w)
	for i := 0; i < rows; i++ {
		_ = Rotate(w[i*in:(i+1)*in], 256)
	}
	cb := ChooseW4A8Codebook(w, 16)
	if cb != W4A8FixedCodebook {
		t.Fatalf("Gaussian weights got a fitted codebook %v", cb)
	}
	q := W4A8Quantizer{GroupSize: 16, RotGroup: 256, Codebook: cb}
	var errSum, norm float64
	for i := 0; i < rows; i++ {
		row := w[i*in : (i+1)*in]
		codes, sRel := make([]byte, in/2), make([]byte, in/16)
		ch, err := q.EncodeRow(codes, sRel, slices.Clone(row))
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range row {
			c := codes[j/2] >> (4 * (j % 2)) & 15
			rv := quant.F8E4M3ToF32(sRel[j/16])
			var levels [16]float32
			for k := range levels {
				levels[k] = min(max(round32(cb[k]*rv), -127), 127)
			}
			got := levels[c]
			for _, l := range levels {
				if abs32(v/ch-l) < abs32(v/ch-got) {
					t.Fatalf("row %d value %d: level %v is not the nearest to %v (%v is nearer)", i, j, got, v/ch, l)
				}
			}
		}
		back := make([]float32, in)
		if err := DecodeW4A8Row(back, codes, sRel, ch, cb[:], nil, 16, 256); err != nil {
			t.Fatal(err)
		}
		// The INT8 grid generate multiplies (W8A8) is the same weight.
		grid, viaGrid := make([]byte, in), make([]float32, in)
		if err := W4A8Int8Row(grid, codes, sRel, cb[:], 16); err != nil {
			t.Fatal(err)
		}
		for j, c := range grid {
			viaGrid[j] = float32(int8(c)) * ch
		}
		_ = Rotate(viaGrid, 256)
		if !slices.Equal(viaGrid, back) {
			t.Fatalf("row %d: the INT8 grid times the channel scale is not the decoded row", i)
		}
		for j := range back {
			d := float64(back[j] - orig[i*in+j])
			errSum += d * d
			norm += float64(orig[i*in+j]) * float64(orig[i*in+j])
		}
	}
	if rel := math.Sqrt(errSum / norm); rel > 0.12 {
		t.Errorf("relative error %.3f, want under 0.12 for Gaussian weights", rel)
	}

	// Heavy tails (a Laplace-like mix with rare huge values) trip the gate.
	heavy := make([]float32, 64*256)
	for i := range heavy {
		heavy[i] = float32(r.ExpFloat64() * r.ExpFloat64() * math.Copysign(1, r.NormFloat64()))
	}
	if cb := ChooseW4A8Codebook(heavy, 16); cb == W4A8FixedCodebook || !slices.IsSorted(cb[:]) {
		t.Errorf("heavy-tailed groups: codebook %v, want a sorted fitted one", cb)
	}
	if err := CheckW4A8Shape(320, 16, 256); err == nil {
		t.Error("row 320 with convrot group 256 accepted")
	}
}

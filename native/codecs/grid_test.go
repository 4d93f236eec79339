package codecs

import (
	"math"
	"testing"
)

// TestSanitizeGridBlock checks each rule of sanitizeGridBlock and that a
// block needing none comes back as the very same slices.
func TestSanitizeGridBlock(t *testing.T) {
	base := func() ([]float32, []float32) {
		x, w := make([]float32, 256), make([]float32, 256)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)))
			w[i] = 1 + float32(i%3)
		}
		return x, w
	}
	xs, ws := make([]float32, 256), make([]float32, 256)
	same := func(a, b []float32) bool { return &a[0] == &b[0] }

	x, w := base()
	gx, gw := sanitizeGridBlock(x, w, xs, ws)
	if !same(gx, x) || !same(gw, w) {
		t.Error("an ordinary block was copied")
	}
	gx, gw = sanitizeGridBlock(x, nil, xs, ws)
	if !same(gx, x) || gw != nil {
		t.Error("an ordinary unweighted block was copied or got weights")
	}

	x, w = base()
	x[3], x[4], x[5] = float32(math.NaN()), float32(math.Inf(-1)), 1e30
	gx, gw = sanitizeGridBlock(x, w, xs, ws)
	if gx[3] != 0 || gx[4] != -gridMaxAbs || gx[5] != gridMaxAbs || gx[6] != x[6] || !same(gw, w) {
		t.Errorf("values: got %v %v %v %v", gx[3], gx[4], gx[5], gx[6])
	}
	if x[3] == 0 {
		t.Error("the caller's values were modified")
	}

	x, w = base()
	for i := range x {
		x[i] *= 1e-10
	}
	gx, _ = sanitizeGridBlock(x, w, xs, ws)
	for i, v := range gx {
		if v != 0 {
			t.Fatalf("tiny block: element %d = %g, want 0", i, v)
		}
	}

	for name, spoil := range map[string]func(w []float32){
		"nan":        func(w []float32) { w[9] = float32(math.NaN()) },
		"negative":   func(w []float32) { w[9] = -1 },
		"inf":        func(w []float32) { w[9] = float32(math.Inf(1)) },
		"zero group": func(w []float32) { clear(w[64:96]) },
	} {
		x, w = base()
		spoil(w)
		_, gw = sanitizeGridBlock(x, w, xs, ws)
		for i, v := range gw {
			if v != 1 {
				t.Fatalf("%s: weight %d = %g, want the ones vector", name, i, v)
			}
		}
	}

	x, w = base()
	for i := 32; i < 64; i++ {
		w[i] = 3e-30
	}
	_, gw = sanitizeGridBlock(x, w, xs, ws)
	if gw[0] != w[0] || gw[33] != w[33]*float32(math.Ldexp(1, 99)) {
		t.Errorf("rescale: group 0 weight %g (want %g), group 1 weight %g", gw[0], w[0], gw[33])
	}
	for i := 32; i < 64; i++ {
		if gw[i] < 1 || gw[i] >= 2 {
			t.Fatalf("rescaled weight %d = %g, want [1, 2)", i, gw[i])
		}
	}

	// Subnormal and huge groups (issue 14, item 3): the factor for a group
	// whose largest value is below 2^-127 overflowed float32 to +Inf.
	for _, tiny := range []float32{1e-40, 1e-45, math.SmallestNonzeroFloat32, math.MaxFloat32} {
		x, w = base()
		for i := 64; i < 96; i++ {
			w[i] = tiny
		}
		w[70] = 0 // mixed with a zero inside the group
		_, gw = sanitizeGridBlock(x, w, xs, ws)
		for i, v := range gw {
			if !(v >= 0 && v < 2*gridWeightHi) {
				t.Fatalf("group at %g: weight %d = %g, want finite", tiny, i, v)
			}
		}
		if gw[64] < 1 || gw[64] >= 2 {
			t.Errorf("group at %g: rescaled to %g, want [1, 2)", tiny, gw[64])
		}
	}
}

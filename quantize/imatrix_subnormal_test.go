package quantize

import (
	"math"
	"testing"

	"github.com/sdtool/sdtool/quant/imatrix"
)

// TestImportanceWithoutSubnormals: an imatrix entry of subnormal values is
// rescaled (largest 1, ratios kept) so that no quantizer computes with
// subnormals, which took 37 s for an 8 KB iq1_s tensor (issue 35, item
// 8); normal entries are left exactly as they are.
func TestImportanceWithoutSubnormals(t *testing.T) {
	sub := []float32{math.Float32frombits(2), math.Float32frombits(4), 0, math.Float32frombits(1 << 20)}
	imp := &Importance{Entries: map[string]*imatrix.Entry{
		"a.weight": {Name: "a.weight", Sum2: sub, Counts: []float32{1}},
		"b.weight": {Name: "b.weight", Sum2: []float32{1e-30, 3, 0.5, 2}, Counts: []float32{1}},
	}}
	v, ok, err := imp.Vector("a.weight", 4)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	for i, x := range v {
		if x != 0 && math.Abs(float64(x)) < 0x1p-126 {
			t.Errorf("value %d is still subnormal: %g", i, x)
		}
	}
	if v[3] != 1 || v[2] != 0 || v[1] != float32(4.0/(1<<20)) {
		t.Errorf("rescaled to %v", v)
	}
	w, _, _ := imp.Vector("b.weight", 4)
	if w[0] != 1e-30 || w[1] != 3 {
		t.Errorf("a normal vector changed: %v", w)
	}
}

package clip

import (
	"math"
	"reflect"
	"testing"

	"github.com/sdtool/sdtool/infer"
)

func TestApplyWeightsKeepsMean(t *testing.T) {
	const hidden = 3
	h := []float32{1, 2, 3, -1, 0.5, 4, 2, 2, 2}
	w := []float32{1, 1.21, 1 / 1.1}
	orig := append([]float32(nil), h...)
	infer.ApplyWeights(h, w, hidden)
	var before, after float64
	for i := range h {
		before += float64(orig[i])
		after += float64(h[i])
	}
	if math.Abs(before-after) > 1e-5*math.Abs(before) {
		t.Fatalf("sum %v before, %v after", before, after)
	}
	// Every value is its weight times one common factor.
	f := float64(h[0]) / float64(orig[0])
	for i := range h {
		want := float64(orig[i]) * float64(w[i/hidden]) * f
		if math.Abs(float64(h[i])-want) > 1e-6*math.Abs(want) {
			t.Fatalf("h[%d] = %v, want %v (factor %v)", i, h[i], want, f)
		}
	}
	// All-one weights leave the states alone, and a zero mean after weighting skips the rescaling.
	same := append([]float32(nil), orig...)
	infer.ApplyWeights(same, []float32{1, 1, 1}, hidden)
	if !reflect.DeepEqual(same, orig) {
		t.Fatalf("weights of 1 changed %v to %v", orig, same)
	}
	z := []float32{1, -1}
	infer.ApplyWeights(z, []float32{2, 2}, 1)
	if !reflect.DeepEqual(z, []float32{2, -2}) {
		t.Fatalf("zero mean: %v", z)
	}
}

func TestZeroAfterEOS(t *testing.T) {
	const eos = 9
	ids := []int{8, 1, eos, eos, eos, eos, 8, 2, eos, 5, 5, 5, 8, 3, 4, 5, 6, 7}
	ZeroAfterEOS(ids, 6, eos)
	want := []int{8, 1, eos, 0, 0, 0, 8, 2, eos, 0, 0, 0, 8, 3, 4, 5, 6, 7}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("got %v, want %v", ids, want)
	}
}

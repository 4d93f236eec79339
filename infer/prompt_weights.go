package infer

import (
	"math"
)

// ApplyWeights scales each token's hidden state by its prompt weight and then rescales the whole chunk so
// that its mean is unchanged, as stable-diffusion.cpp (after A1111) does, in its arithmetic: each mean is
// summed in float64 and rounded to float32, and their quotient is a float32. The mean of a chunk can lie
// near zero (layer-normed states), where that quotient amplifies any difference, so the rounding matters.
func ApplyWeights(h []float32, w []float32, hidden int) {
	same := true
	for _, x := range w {
		if x != 1 {
			same = false
		}
	}
	if same {
		return
	}
	before := meanF32(h)
	for i := range w {
		for j := 0; j < hidden; j++ {
			h[i*hidden+j] *= w[i]
		}
	}
	after := meanF32(h)
	if after == 0 || !finite32(after) || !finite32(before) {
		return
	}
	f := before / after
	for i := range h {
		h[i] *= f
	}
}

// meanF32 is the mean of h summed in float64, rounded to float32 (sd::Tensor<float>::mean).
func meanF32(h []float32) float32 {
	var s float64
	for _, v := range h {
		s += float64(v)
	}
	return float32(s / float64(len(h)))
}

func finite32(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

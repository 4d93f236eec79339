package codecs

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/formats"
)

// GridIQTypes lists the grid-based IQ types whose quantizers sdtool takes
// from ggml (this package registers them): lattice searches that sdtool does
// not reimplement in Go.
var GridIQTypes = []formats.DType{
	formats.IQ2_XXS, formats.IQ2_XS, formats.IQ2_S, formats.IQ3_XXS, formats.IQ3_S, formats.IQ1_S, formats.IQ1_M,
}

// Limits of the values the grid quantizers are given. ggml's lattice
// searches abort the process (GGML_ASSERT, "point not on grid") when their
// weighted sums overflow or underflow, which happens for NaN or Inf inputs,
// magnitudes near 1e18, negative or non-finite importance values, a group
// of 32 elements whose importance values are all zero, and importance values
// near 1e-30. sanitizeGridBlock keeps every block inside a range where the
// searches are well defined; blocks already inside it are left untouched, so
// their bytes are exactly what ggml (and stable-diffusion.cpp) would write.
const (
	// gridMaxAbs is the largest magnitude passed to ggml. Every grid type
	// overflows its f16 block scale near 3e7 at most, so larger values
	// cannot be represented anyway.
	gridMaxAbs = 1 << 25
	// gridMinBlock is the block maximum below which a block is encoded as
	// zeros: the smallest nonzero value any grid type can store (an f16
	// subnormal scale times its smallest multiplier) is above 7e-9, so
	// such values round to zero anyway.
	gridMinBlock = 1.0 / (1 << 30)
	// gridWeightLo and gridWeightHi bound the largest importance value of a
	// group of 32; a group outside is rescaled by a power of two, which
	// changes no decision of ggml's searches (they compare sums that are
	// homogeneous in the weights of the group) but avoids underflow and
	// overflow.
	gridWeightLo = 1.0 / (1 << 16)
	gridWeightHi = 1 << 16
)

// sanitizeGridBlock checks one block of 256 values x and their importance
// values w (nil for ggml's unweighted path) and, when ggml's grid searches
// could abort on them, writes a safe copy into xs and ws (each at least 256
// long) and returns those; otherwise it returns x and w unchanged. The rules:
// NaN becomes 0 and magnitudes are clamped to 2^25; a block whose largest
// magnitude is below 2^-30 becomes all zeros; importance values that are
// NaN, Inf or negative, or a group of 32 whose values are all zero, make the
// whole block use ones (what stable-diffusion.cpp uses without an imatrix);
// a group of 32 whose largest importance value is outside [2^-16, 2^16] is
// scaled by a power of two into [1, 2).
func sanitizeGridBlock(x, w, xs, ws []float32) ([]float32, []float32) {
	x, xs = x[:256], xs[:256]
	maxAbs := float32(0)
	xClean := true
	for _, v := range x {
		a := float32(math.Abs(float64(v)))
		if !(a <= gridMaxAbs) { // also NaN
			xClean = false
			continue
		}
		maxAbs = max(maxAbs, a)
	}
	if !xClean {
		maxAbs = 0
		for i, v := range x {
			switch {
			case v != v:
				v = 0
			case v > gridMaxAbs:
				v = gridMaxAbs
			case v < -gridMaxAbs:
				v = -gridMaxAbs
			}
			xs[i] = v
			maxAbs = max(maxAbs, float32(math.Abs(float64(v))))
		}
		x = xs
	}
	if maxAbs < gridMinBlock {
		clear(xs)
		x = xs
	}
	if w == nil {
		return x, nil
	}
	w, ws = w[:256], ws[:256]
	ones := false
	rescale := false
	for g := 0; g < 256 && !ones; g += 32 {
		gmax := float32(0)
		for _, v := range w[g : g+32] {
			if !(v >= 0 && v <= math.MaxFloat32) { // NaN, negative, Inf
				ones = true
				break
			}
			gmax = max(gmax, v)
		}
		if gmax == 0 {
			ones = true
		} else if gmax < gridWeightLo || gmax > gridWeightHi {
			rescale = true
		}
	}
	switch {
	case ones:
		for i := range ws {
			ws[i] = 1
		}
		return x, ws
	case rescale:
		for g := 0; g < 256; g += 32 {
			gmax := float32(0)
			for _, v := range w[g : g+32] {
				gmax = max(gmax, v)
			}
			// The factor is applied in float64: for a subnormal gmax it is
			// up to 2^149, beyond float32's range, while every product is
			// at most 2 and so fits again.
			s := 1.0
			if gmax < gridWeightLo || gmax > gridWeightHi {
				_, e := math.Frexp(float64(gmax)) // gmax = f * 2^e, f in [0.5, 1)
				s = math.Ldexp(1, 1-e)            // gmax*s in [1, 2)
			}
			for i := g; i < g+32; i++ {
				ws[i] = float32(float64(w[i]) * s)
			}
		}
		return x, ws
	}
	return x, w
}

// checkGridRow reports why a row cannot be handed to ggml's grid quantizer
// for t: the type must be one of GridIQTypes, the row a whole number of
// 256-element blocks, dst exactly its encoded size and weights nil or as long
// as src. These are the preconditions ggml asserts on.
func checkGridRow(t formats.DType, dst []byte, src, weights []float32) error {
	grid := false
	for _, g := range GridIQTypes {
		grid = grid || g == t
	}
	if !grid {
		return fmt.Errorf("ggml: %s is not a grid IQ type", t)
	}
	if len(src) == 0 || len(src)%256 != 0 {
		return fmt.Errorf("ggml: %s row of %d elements is not a positive multiple of 256", t, len(src))
	}
	if want := len(src) / 256 * t.Info().BlockBytes; len(dst) != want {
		return fmt.Errorf("ggml: %s output of %d bytes for %d elements, want %d", t, len(dst), len(src), want)
	}
	if weights != nil && len(weights) != len(src) {
		return fmt.Errorf("ggml: %d importance values for a %s row of %d", len(weights), t, len(src))
	}
	return nil
}

package quant

// Vector kernels. The hot loops of the scale searches evaluate many
// candidate scales that do not depend on each other; the kernels below form
// their sums with one candidate per vector lane, so that every lane performs
// exactly the float32 operations, in exactly the order, that ggml performs
// for that candidate: the bytes do not change, only how many candidates run
// at once. Each kernel has a portable Go version here, which defines its
// result, and, on CPUs that have them, assembly versions
// (kernels_amd64.s), which the tests check against the Go ones bit for bit.
// The searches choose between their scalar code and the lane form with the
// flags in simd, which are set at start-up from the CPU's features and
// which the tests clear to run the scalar code as well; building with the
// purego tag leaves out the assembly.

// simdFlags says which kernel families run in the lane form.
type simdFlags struct {
	// qx: makeQxQuants (q4_0/q5_0 weighted, q3_K weighted, q6_K).
	qx bool
}

// simd holds the kernel families this CPU runs in the lane form; it is set
// once at start-up (simdDetected) and otherwise only changed by tests.
var simd = simdDetected

// qxLanes is the number of candidates qxLaneSums evaluates at once: the 19 of
// make_qx_quants, padded.
const qxLanes = 24

// qxLaneSumsGo is the portable qxLaneSums: for every lane k it forms
// ggml's make_qx_quants sums over x[:n] for the inverse scale
// is = num[k]/vmax,
//
//	sumlx[k] = Σ (w[i]·x[i])·l,  suml2[k] = Σ (w[i]·l)·l,
//	l = clamp(nearest_int(is·x[i]), lo, hi),
//
// in ggml's order, with nearest_int's own arithmetic (any input).
func qxLaneSumsGo(x, w []float32, num *[qxLanes]float32, vmax float32, lo, hi int32, sumlx, suml2 *[qxLanes]float32) {
	n := len(x)
	w = w[:n]
	for k, nk := range num {
		s := nk / vmax
		var slx, sl2 float32
		for i, v := range x {
			r := float32(clampInt32(cNearestInt(float32(s*v)), lo, hi))
			slx += float32(float32(w[i]*v) * r)
			sl2 += float32(float32(w[i]*r) * r)
		}
		sumlx[k], suml2[k] = slx, sl2
	}
}

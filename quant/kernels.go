package quant

import "math"

// Vector kernels. The hot loops of the scale searches evaluate many
// candidate scales that do not depend on each other; the kernels below form
// their sums with one candidate per vector lane, so that every lane performs
// exactly the float32 operations, in exactly the order, that ggml performs
// for that candidate: the bytes do not change, only how many candidates run
// at once. Each search kernel has a portable Go version here, which defines
// its result, and assembly versions (kernels_amd64.s with AVX2,
// kernels_arm64.s with NEON), which the tests check against the Go ones bit
// for bit. The unweighted legacy blocks and the f16/bf16 rows have row
// kernels (legacy_amd64.s, float_amd64.s, kernels_arm64.s; rows_asm.go) that
// hand every block with special values back to the scalar code.
//
// The codecs choose between their scalar code and the kernels with the
// flags in simd, which are set at start-up from the CPU's features and
// which the tests clear to run the scalar code as well (and set to run the
// lane-form drivers with the portable kernels where there is no assembly).
// Building with the purego tag leaves out the assembly.

// simdFlags says which kernel families run in the lane form.
type simdFlags struct {
	// qx: makeQxQuants (q4_0/q5_0 weighted, q3_K weighted, q6_K).
	qx bool
	// qkx: makeQkxQuants (q4_1/q5_1 weighted, q2_K, q4_K, q5_K).
	qkx bool
	// legacy: the unweighted q4_0, q4_1, q5_0, q5_1 and q8_0 rows.
	legacy bool
	// floats: the f16 and bf16 rows.
	floats bool
	// wide: AVX-512 versions of the kernels that have one, where the CPU
	// has it.
	wide bool
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

// qkxLanes is the number of candidates qkxLaneEval evaluates at once.
const qkxLanes = 8

// qkxParams are the inputs of qkxLaneEval that are the same in every lane.
// The field order is part of the assembly's interface.
type qkxParams struct {
	is0    float32 // the first lane's candidate index is, as a float
	rmin   float32
	rdelta float32
	nmax   float32 // the largest level
	span   float32 // max - min
	sumW   float32 // Σ w
	sumX   float32 // Σ w·x
	mad    uint32  // 1: absolute errors; 0: squared
	// init 1 makes lane 0 the search's first candidate instead: inverse
	// scale iscale0, scale s0 and offset m0 as given, no fit.
	init            uint32
	iscale0, s0, m0 float32
}

// qkxLaneOut are qkxLaneEval's results: per lane the candidate's weighted
// error (NaN when its normal equations are singular, so that it never
// wins), its refined scale and offset, and its levels, lv[i][lane]. The
// field order is part of the assembly's interface.
type qkxLaneOut struct {
	err, s, m [qkxLanes]float32
	lv        [32][qkxLanes]float32
}

// qkxLaneEvalGo is the portable qkxLaneEval: lane k evaluates
// make_qkx2_quants' candidate is = is0+k against the current offset min,
// given xm[i] = x[i]-min: the levels clamp(nearest_int(iscale·xm[i]), 0,
// nmax) for iscale = (rmin + rdelta·is + nmax)/span, their weighted sums,
// the least-squares scale and offset (the offset capped at 0), and the
// weighted error, all in ggml's order and with nearest_int's own arithmetic
// (any input). With p.init, lane 0 is the search's first candidate instead:
// its levels and error for the given inverse scale, scale and offset.
func qkxLaneEvalGo(x, w, xm []float32, p *qkxParams, o *qkxLaneOut) {
	n := len(x)
	w, xm = w[:n], xm[:n]
	nmax := int32(p.nmax)
	for k := range qkxLanes {
		iscale := (p.rmin + float32(p.rdelta*float32(p.is0+float32(k))) + p.nmax) / p.span
		first := k == 0 && p.init != 0
		if first {
			iscale = p.iscale0
		}
		var sumL, sumL2, sumXL float32
		for i, v := range xm {
			l := float32(clampInt32(cNearestInt(float32(iscale*v)), 0, nmax))
			o.lv[i][k] = l
			wl := float32(w[i] * l)
			sumL += wl
			sumL2 += float32(wl * l)
			sumXL += float32(wl * x[i])
		}
		D := float32(p.sumW*sumL2) - float32(sumL*sumL)
		s := (float32(p.sumW*sumXL) - float32(p.sumX*sumL)) / D
		m := (float32(sumL2*p.sumX) - float32(sumL*sumXL)) / D
		if m > 0 {
			m = 0
			s = sumXL / sumL2
		}
		if first {
			s, m, D = p.s0, p.m0, 1
		}
		var e float32
		for i, v := range x {
			diff := float32(s*o.lv[i][k]) + m - v
			if p.mad != 0 {
				e += float32(w[i] * cFabs(diff))
			} else {
				e += float32(w[i] * float32(diff*diff))
			}
		}
		if !(D > 0) {
			e = float32(math.NaN())
		}
		o.err[k], o.s[k], o.m[k] = e, s, m
	}
}

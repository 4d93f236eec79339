package quant

import (
	"math"
	"math/bits"
)

// This file holds the scale searches that ggml's k-quants share
// (make_qx_quants, make_q3_quants, make_qkx2/qkx3_quants, make_qp_quants in
// ggml-quants.c), rewritten so that every float32 operation happens in the
// same order and with the same rounding as ggml compiled without fused
// multiply-adds. Products that feed an addition are wrapped in float32(...):
// the Go spec guarantees that an explicit conversion rounds, so the compiler
// may not fuse them (it would on arm64). No accumulator is widened to
// float64, because ggml accumulates these sums in float.

// groupMaxEps is ggml's GROUP_MAX_EPS: groups whose largest magnitude is
// below it are treated as all zero.
const groupMaxEps = float32(1e-15)

// roundMagic is 1.5*2^23: for |v| < 2^22, (v+roundMagic)-roundMagic is v
// rounded to the nearest integer, ties to even, exactly as cNearestInt
// rounds; roundLimit keeps products safely inside that range.
const (
	roundMagic = float32(12582912)
	roundLimit = float32(4e6)
)

// qkBlock is ggml's QK_K, the super-block size of the k-quants.
const qkBlock = 256

// clampInt32 limits v to [lo, hi] the way ggml's MAX(lo, MIN(hi, v)) does.
func clampInt32(v, lo, hi int32) int32 {
	return max(lo, min(hi, v))
}

// qxSteps are make_qx_quants' candidate offsets is, in ggml's order: the
// scale -(nmax+0.1*is)/max for is = -9..9 without 0.
var qxSteps = [18]float32{-9, -8, -7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9}

// makeQxQuants is ggml's make_qx_quants with rmse_type 1, the only variant
// the k-quants use: a symmetric scale for levels -nmax..nmax-1, chosen among
// 19 candidate scales by weighted least squares. The weight of element i is
// qw[i], or x[i]^2 when qw is nil. L receives the levels plus nmax. x holds
// at most 32 elements.
func makeQxQuants(nmax int32, x []float32, L []int8, qw []float32) float32 {
	if simd.qx {
		return makeQxQuantsLanes(nmax, x, L, qw)
	}
	return makeQxQuantsScalar(nmax, x, L, qw)
}

// makeQxQuantsScalar is makeQxQuants one candidate after another.
func makeQxQuantsScalar(nmax int32, x []float32, L []int8, qw []float32) float32 {
	n := len(x)
	L = L[:n]
	// w and wx are each element's weight and weight times x; ggml forms
	// w*x[i] (then times the level) the same way for every candidate.
	var w2, wx2 [32]float32
	w, wx := w2[:n], wx2[:n]
	if qw != nil {
		copy(w, qw[:n])
	} else {
		for i, v := range x {
			w[i] = float32(v * v)
		}
	}
	var vmax, amax float32
	nanIn := false
	for i, v := range x {
		if ax := cFabs(v); ax > amax {
			amax, vmax = ax, v
		}
		nanIn = nanIn || v != v
		wx[i] = float32(w[i] * v)
	}
	if amax < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	if nanIn {
		amax = float32(math.NaN()) // every candidate takes the exact path
	}
	fn := float32(nmax)
	// best holds the winning candidate's levels, la and lb the current
	// pair's, all as the bits of level+roundMagic (see qxLevels2).
	var best2, la2, lb2 [32]uint32
	best, la, lb := best2[:n], la2[:n], lb2[:n]
	iscale := float32(-nmax) / vmax
	qxLevels2(x, la, best, iscale, iscale, amax, nmax, roundMagic)
	sumlx, suml2 := qxSums(w, wx, best)
	copy(lb, best)
	scale := float32(0)
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	bestS := scale * sumlx
	// The candidates go in pairs: their levels do not depend on each other,
	// so computing two at once is exact. A candidate with the previous
	// candidate's levels has its sums: it either repeats a comparison that
	// failed against the same best or re-wins with the state it would set,
	// so it is skipped.
	try := func(lv []uint32) {
		sumlx, suml2 := qxSums(w, wx, lv)
		if suml2 > 0 && float32(sumlx*sumlx) > float32(bestS*suml2) {
			copy(best, lv)
			scale = sumlx / suml2
			bestS = scale * sumlx
		}
	}
	for k := 0; k < len(qxSteps); k += 2 {
		ia := -(fn + float32(float32(0.1)*qxSteps[k])) / vmax
		ib := -(fn + float32(float32(0.1)*qxSteps[k+1])) / vmax
		changedA, changedB := qxLevels2(x, la, lb, ia, ib, amax, nmax, roundMagic)
		if changedA {
			try(la)
		}
		if changedB {
			try(lb)
		}
	}
	for i, b := range best {
		L[i] = int8(int32(b-magicBits) + nmax)
	}
	return scale
}

// qxNumerators holds, for nmax = 4, 8, 16 and 32, the numerators of
// make_qx_quants' 19 inverse scales (the scale is numerator/max): -nmax,
// then -(nmax+0.1·is) for is = -9..9 without 0, padded with -nmax.
var qxNumerators [4][qxLanes]float32

func init() {
	for j := range qxNumerators {
		nmax := int32(4) << j
		num := &qxNumerators[j]
		fn := float32(nmax)
		for k := range num {
			num[k] = float32(-nmax)
		}
		for k, step := range qxSteps {
			num[k+1] = -(fn + float32(float32(0.1)*step))
		}
	}
}

// makeQxQuantsLanes is makeQxQuants with all 19 candidates' sums formed at
// once by qxLaneSums (a lane each), then compared in ggml's order.
func makeQxQuantsLanes(nmax int32, x []float32, L []int8, qw []float32) float32 {
	var num *[qxLanes]float32
	switch nmax {
	case 4, 8, 16, 32:
		num = &qxNumerators[bits.TrailingZeros32(uint32(nmax))-2]
	}
	n := len(x)
	amaxBits, imax := absMaxFirstN(x)
	if num == nil || n > 32 || amaxBits > 0x7f800000 {
		// A NaN element (or an nmax no codec uses): the scalar search
		// follows ggml's comparisons, which skip NaN.
		return makeQxQuantsScalar(nmax, x, L, qw)
	}
	L = L[:n]
	amax, vmax := math.Float32frombits(amaxBits), x[imax]
	if amax < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	var w2 [32]float32
	w := w2[:n]
	if qw != nil {
		copy(w, qw[:n])
	} else {
		for i, v := range x {
			w[i] = float32(v * v)
		}
	}
	// The largest |num| is that of is = 9, and dividing by the same vmax
	// keeps the order of the magnitudes.
	fast := float32(cFabs(num[len(qxSteps)]/vmax)*amax) < roundLimit
	var sumlx, suml2 [qxLanes]float32
	qxLaneSums(x, w, num, vmax, -nmax, nmax-1, &sumlx, &suml2, fast)
	scale := float32(0)
	if suml2[0] != 0 {
		scale = sumlx[0] / suml2[0]
	}
	best, win := scale*sumlx[0], 0
	for k := 1; k <= len(qxSteps); k++ {
		if suml2[k] > 0 && float32(sumlx[k]*sumlx[k]) > float32(best*suml2[k]) {
			scale = sumlx[k] / suml2[k]
			best, win = scale*sumlx[k], k
		}
	}
	iscale := num[win] / vmax
	for i, v := range x {
		L[i] = int8(clampInt32(cNearestInt(float32(iscale*v)), -nmax, nmax-1) + nmax)
	}
	return scale
}

// absMaxFirstN is absMaxFirst for up to 32 elements: the largest of the bit
// patterns of |x[i]| and the first index that has it.
func absMaxFirstN(x []float32) (uint32, int) {
	x = x[:min(len(x), 32)]
	var k0, k1 uint64
	i := 0
	for ; i+2 <= len(x); i += 2 {
		k0 = max(k0, uint64(math.Float32bits(x[i])&^(1<<31))<<5|uint64(31-i))
		k1 = max(k1, uint64(math.Float32bits(x[i+1])&^(1<<31))<<5|uint64(30-i))
	}
	if i < len(x) {
		k0 = max(k0, uint64(math.Float32bits(x[i])&^(1<<31))<<5|uint64(31-i))
	}
	k := max(k0, k1)
	return uint32(k >> 5), 31 - int(k&31)
}

// qxLevels2 computes the levels clamp(round(iscale*x), -nmax, nmax-1) of
// two make_qx_quants candidates, ia into la and ib into lb, each stored as
// the bits of level+roundMagic. It reports whether la changed from the
// previous candidate (the old contents of lb) and whether lb differs from
// la. When every |iscale*x| is within 2^22 (amax bounds |x|; NaN forces the
// other path), adding 1.5*2^23 rounds exactly as cNearestInt does and the
// clamp is an integer min/max on the bits; otherwise cNearestInt's own
// arithmetic runs. magic is roundMagic, passed in so that it stays in a
// register.
//
//go:noinline
func qxLevels2(x []float32, la, lb []uint32, ia, ib, amax float32, nmax int32, magic float32) (changedA, changedB bool) {
	n := len(x)
	la, lb = la[:n], lb[:n]
	var da, db uint32
	if float32(max(cFabs(ia), cFabs(ib))*amax) < roundLimit {
		lo, hi := magicBits-uint32(nmax), magicBits+uint32(nmax-1)
		for i, v := range x {
			a := math.Float32bits(float32(ia*v) + magic)
			b := math.Float32bits(float32(ib*v) + magic)
			a = min(max(a, lo), hi)
			b = min(max(b, lo), hi)
			da |= a ^ lb[i]
			db |= a ^ b
			la[i], lb[i] = a, b
		}
		return da != 0, db != 0
	}
	for i, v := range x {
		a := uint32(magicBits + clampInt32(cNearestInt(float32(ia*v)), -nmax, nmax-1))
		b := uint32(magicBits + clampInt32(cNearestInt(float32(ib*v)), -nmax, nmax-1))
		da |= a ^ lb[i]
		db |= a ^ b
		la[i], lb[i] = a, b
	}
	return da != 0, db != 0
}

// qxSums returns a candidate's weighted sums of l*x and l^2 in ggml's order,
// (w*x)*l and (w*l)*l, for the levels in lb.
//
//go:noinline
func qxSums(w, wx []float32, lb []uint32) (sumlx, suml2 float32) {
	n := len(lb)
	w, wx = w[:n], wx[:n]
	for i, b := range lb {
		r := math.Float32frombits(b) - roundMagic
		sumlx += float32(wx[i] * r)
		suml2 += float32(float32(w[i]*r) * r)
	}
	return sumlx, suml2
}

// makeQ3Quants is ggml's make_q3_quants with do_rmse set (q3_K's reference
// path): levels -nmax..nmax-1 from the largest magnitude, then up to five
// passes that move single elements to a better level, weighted by x^2. L
// receives the levels plus nmax (or zeros for an all-zero group).
func makeQ3Quants(nmax int32, x []float32, L []int8) float32 {
	n := len(x)
	L = L[:n]
	var vmax, amax float32
	if amaxBits, imax := absMaxFirstN(x); n <= 32 && amaxBits <= 0x7f800000 {
		amax, vmax = math.Float32frombits(amaxBits), x[imax]
	} else {
		// A NaN, which ggml's "ax > amax" skips.
		for _, v := range x {
			if ax := cFabs(v); ax > amax {
				amax, vmax = ax, v
			}
		}
	}
	if amax < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	// ggml forms the weight x² and x²·x afresh in every pass; they are
	// the same each time, so they are formed once.
	var w2, wx2 [32]float32
	w, wx := w2[:n], wx2[:n]
	iscale := float32(-nmax) / vmax
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampInt32(cNearestInt(float32(iscale*v)), -nmax, nmax-1)
		L[i] = int8(l)
		fl := float32(l)
		wi := float32(v * v)
		w[i], wx[i] = wi, float32(wi*v)
		sumlx += float32(wx[i] * fl)
		suml2 += float32(float32(wi*fl) * fl)
	}
	for range 5 {
		changed := false
		for i, v := range x {
			wi, wxi := w[i], wx[i]
			li := float32(L[i])
			slx := sumlx - float32(wxi*li)
			if slx > 0 {
				sl2 := suml2 - float32(float32(wi*li)*li)
				nl := clampInt32(cNearestInt(float32(v*sl2)/slx), -nmax, nmax-1)
				if nl != int32(L[i]) {
					fl := float32(nl)
					slx += float32(wxi * fl)
					sl2 += float32(float32(wi*fl) * fl)
					if sl2 > 0 && float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
						L[i] = int8(nl)
						sumlx, suml2 = slx, sl2
						changed = true
					}
				}
			}
		}
		if !changed {
			break
		}
	}
	for i := range L {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// makeQkxQuants is ggml's make_qkx2_quants (and, with weights always given,
// make_qkx3_quants, whose only difference is a max <= min test that cannot
// differ from max == min here): an asymmetric scale and offset for levels
// 0..nmax, searched over nstep+1 candidate scales starting from
// (rmin+nmax)/(max-min) in steps of rdelta, each refined by weighted least
// squares and kept when its weighted error (absolute with useMad, squared
// otherwise) is smaller. It returns the scale and the offset to subtract
// (ggml's the_min, never negative). x holds at most 32 elements.
func makeQkxQuants(nmax int32, x, weights []float32, L []uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, theMin float32) {
	if simd.qkx && len(x) <= 32 {
		return makeQkxQuantsLanes(nmax, x, weights, L, rmin, rdelta, nstep, useMad)
	}
	return makeQkxQuantsScalar(nmax, x, weights, L, rmin, rdelta, nstep, useMad)
}

// makeQkxQuantsLanes is makeQkxQuants with the candidates evaluated eight
// at a time by qkxLaneEval (a lane each), then compared in ggml's order. A
// winning candidate changes the offset that the later candidates' levels
// depend on, so the lanes after a winner are discarded and the next group
// starts right after it. It is long for the reason makeQkxQuantsScalar is:
// it follows ggml's order of operations step by step.
func makeQkxQuantsLanes(nmax int32, x, weights []float32, L []uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, theMin float32) {
	n := len(x)
	weights = weights[:n]
	L = L[:n]
	vmin, vmax, ok := minMaxFast(x)
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		v := x[i]
		if !ok {
			// ggml's comparisons, for NaN and ±0 extremes.
			if v < vmin {
				vmin = v
			}
			if v > vmax {
				vmax = v
			}
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * v)
	}
	xlo := vmin
	if vmin > 0 {
		vmin = 0
	}
	if vmax == vmin {
		for i := range L {
			L[i] = 0
		}
		return 0, -vmin
	}
	var xm2 [32]float32
	xm := xm2[:n]
	nanIn := sumX != sumX
	// See makeQkxQuantsScalar: a bound on |x[i]-min| for the fast-path
	// test, NaN when the input holds a NaN.
	xmBound := func() float32 {
		a, b := cFabs(vmax-vmin), cFabs(xlo-vmin)
		if b > a {
			a = b
		}
		if nanIn {
			return float32(math.NaN())
		}
		return a
	}
	xmMax := xmBound()
	span := vmax - vmin
	fn := float32(nmax)
	for i, v := range x {
		xm[i] = v - vmin
	}
	// Lane 0 of the first group is ggml's first candidate, nmax/(max-min)
	// with its reciprocal as the scale; lanes 1..7 are is = 0..6.
	iscale0 := fn / span
	p := qkxParams{
		is0: -1, rmin: rmin, rdelta: rdelta, nmax: fn, span: span, sumW: sumW, sumX: sumX,
		init: 1, iscale0: iscale0, s0: 1 / iscale0, m0: vmin,
	}
	if useMad {
		p.mad = 1
	}
	var o qkxLaneOut
	var bestErr float32
	take := func(k int) {
		for i := range L {
			L[i] = uint8(o.lv[i][k])
		}
		bestErr = o.err[k]
		scale, vmin = o.s[k], o.m[k]
	}
	first := true
	for is := -1; is <= nstep; {
		cnt := min(qkxLanes, nstep+1-is)
		p.is0, p.span = float32(is), span
		// The inverse scales grow with is (rmin+nmax > 0), so the last
		// lane's bounds them all (and the first candidate's).
		top := max(cFabs((rmin+float32(rdelta*float32(is+qkxLanes-1))+fn)/span), cFabs(p.iscale0))
		qkxLaneEval(x, weights, xm, &p, &o, float32(top*xmMax) < roundLimit)
		k := 0
		if first {
			// The first candidate always sets the state, and it keeps the
			// offset, so the rest of its group (is = 0..6) stays valid.
			first, p.init, p.iscale0 = false, 0, 0
			take(0)
			if nstep < 1 {
				break
			}
			k = 1
		}
		for k < cnt && !(o.err[k] < bestErr) {
			k++
		}
		if k == cnt {
			is += cnt
			continue
		}
		take(k)
		// Later candidates use the new offset, in x-min and in max-min.
		for i, v := range x {
			xm[i] = v - vmin
		}
		span = vmax - vmin
		xmMax = xmBound()
		is += k + 1
	}
	return scale, -vmin
}

// minMaxFast returns the smallest and largest element of x (1 <= len(x)
// <= 32) without branches, when ggml's "x < min" / "x > max" scan gives
// the same: ok is false when x holds a NaN or Inf, or when an extreme is a
// zero (±0 compare equal, so the scan keeps the first one met).
func minMaxFast(x []float32) (mn, mx float32, ok bool) {
	lo, hi := int32(math.MaxInt32), int32(math.MinInt32)
	var abits uint32
	for _, v := range x {
		b := math.Float32bits(v)
		k := orderKey(b)
		lo, hi = min(lo, k), max(hi, k)
		abits = max(abits, b&^(1<<31))
	}
	l, h := keyBits(lo), keyBits(hi)
	if len(x) == 0 || abits >= 0x7f800000 || l&^(1<<31) == 0 || h&^(1<<31) == 0 {
		return x[0], x[0], false
	}
	return math.Float32frombits(l), math.Float32frombits(h), true
}

// makeQkxQuantsScalar is makeQkxQuants one candidate (or pair) at a time.
// It is long because it follows ggml's make_qkx3_quants step by step (the
// same float operations in the same order, which byte-exactness needs), so
// that it can be checked line against line with it.
func makeQkxQuantsScalar(nmax int32, x, weights []float32, L []uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, theMin float32) {
	n := len(x)
	weights = weights[:n]
	L = L[:n]
	vmin, vmax := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		v := x[i]
		if v < vmin {
			vmin = v
		}
		if v > vmax {
			vmax = v
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * v)
	}
	xlo := vmin // the smallest element, before the offset is capped at 0
	if vmin > 0 {
		vmin = 0
	}
	if vmax == vmin {
		for i := range L {
			L[i] = 0
		}
		return 0, -vmin
	}
	// ggml recomputes x[i]-min for every candidate; it only changes when a
	// candidate wins, so it is kept in xm and refreshed then. Rounding is
	// monotone, so |x[i]-min| is at most the larger of |xlo-min| and
	// |max-min|; a NaN (which the running min and max skip) makes the
	// bound NaN, which sends every candidate down the exact path.
	var xm2 [32]float32
	xm := xm2[:n]
	nanIn := sumX != sumX
	xmBound := func() float32 {
		a, b := cFabs(vmax-vmin), cFabs(xlo-vmin)
		if b > a {
			a = b
		}
		if nanIn {
			return float32(math.NaN())
		}
		return a
	}
	xmMax := xmBound()
	span := vmax - vmin
	fn := float32(nmax)
	iscale := fn / span
	scale = 1 / iscale
	var bestErr float32
	for i, v := range x {
		xm[i] = v - vmin
		l := clampInt32(cNearestInt(float32(iscale*xm[i])), 0, nmax)
		L[i] = uint8(l)
		diff := float32(scale*float32(l)) + vmin - v
		if useMad {
			diff = cFabs(diff)
		} else {
			diff = float32(diff * diff)
		}
		bestErr += float32(weights[i] * diff)
	}
	if nstep < 1 {
		return scale, -vmin
	}
	// Candidates are evaluated two at a time, A = is and B = is+1, so that
	// the latency-bound sums of two candidates overlap. That speculates that
	// A does not win: a winning A changes min, which B's levels depend on,
	// so B is then dropped and the next pair starts at it. la/lb hold the
	// pair's levels as bits (see qkxLevels2), fa/fb as the floats the sums
	// use; after a pair, lb holds the last candidate evaluated.
	var la2, lb2 [32]uint32
	var fa2, fb2 [32]float32
	la, lb, fa, fb := la2[:n], lb2[:n], fa2[:n], fb2[:n]
	// fit turns a candidate's sums into ggml's refined scale and offset; ok
	// is false when the normal equations are singular (D <= 0).
	fit := func(sumL, sumL2, sumXL float32) (s, m float32, ok bool) {
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if !(D > 0) {
			return 0, 0, false
		}
		s = (float32(sumW*sumXL) - float32(sumX*sumL)) / D
		m = (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
		if m > 0 {
			m = 0
			s = sumXL / sumL2
		}
		return s, m, true
	}
	win := func(lf []float32, err, s, m float32) {
		for i, r := range lf {
			L[i] = uint8(r)
		}
		bestErr = err
		scale, vmin = s, m
		// ggml's later candidates use the new min, both in x-min and in
		// max-min.
		for i, v := range x {
			xm[i] = v - vmin
		}
		span = vmax - vmin
		xmMax = xmBound()
	}
	havePrev := false
	for is := 0; is <= nstep; {
		hasB := is < nstep
		ia := (rmin + float32(rdelta*float32(is)) + fn) / span
		ib := ia
		if hasB {
			ib = (rmin + float32(rdelta*float32(is+1)) + fn) / span
		}
		changedA, changedB := qkxLevels2(xm, la, lb, ia, ib, xmMax, nmax, xlo >= vmin)
		// The sums, and so the refined scale, offset and error, depend only
		// on the levels. A candidate with the previous candidate's levels
		// either repeats a loser against the same best error or ties the
		// winner it repeats, so ggml's state after it is unchanged: skip it.
		needA := changedA || !havePrev
		needB := hasB && changedB
		havePrev = true
		var sa, ma, sb, mb float32
		var okA, okB bool
		switch {
		case needA && needB:
			l1, l2, xl, m1, m2, yl := qkxSums2(x, weights, fa, fb, la, lb)
			sa, ma, okA = fit(l1, l2, xl)
			sb, mb, okB = fit(m1, m2, yl)
		case needA:
			sa, ma, okA = fit(qkxSums(x, weights, fa, la))
		case needB:
			sb, mb, okB = fit(qkxSums(x, weights, fb, lb))
		}
		var ea, eb float32
		switch {
		case okA && okB:
			ea, eb = qkxError2(x, weights, fa, fb, sa, ma, sb, mb, useMad)
		case okA:
			ea = qkxError(x, weights, fa, sa, ma, useMad)
		case okB:
			eb = qkxError(x, weights, fb, sb, mb, useMad)
		}
		if okA && ea < bestErr {
			win(fa, ea, sa, ma)
			copy(lb, la) // A is now the previous candidate
			is++
			continue
		}
		if okB && eb < bestErr {
			win(fb, eb, sb, mb)
		}
		is += 2
	}
	return scale, -vmin
}

// The candidate loops of makeQkxQuants live in these small functions so
// that their accumulators stay in registers (inlined into the search, the
// register allocator spilled them, putting a store and a load into every
// step of the dependency chain).

// magicBits are the bits of roundMagic; in its binade, the bits of
// v+roundMagic are magicBits plus v rounded to an integer.
const magicBits = 0x4b400000

// qkxLevels2 computes the levels clamp(round(iscale*xm), 0, nmax) of two
// candidates, ia into la and ib into lb, each stored as the bits of
// level+roundMagic. It reports whether la changed from the previous
// candidate (the old contents of lb) and whether lb differs from la; nonNeg
// says that no xm is negative. When every |iscale*xm| is within 2^22 (xmMax bounds |xm|), adding 1.5*2^23
// rounds exactly as cNearestInt does and the clamp is an integer min/max on
// the bits, without branches; otherwise cNearestInt's own arithmetic runs.
//
//go:noinline
func qkxLevels2(xm []float32, la, lb []uint32, ia, ib, xmMax float32, nmax int32, nonNeg bool) (changedA, changedB bool) {
	n := len(xm)
	la, lb = la[:n], lb[:n]
	var da, db uint32
	if float32(max(cFabs(ia), cFabs(ib))*xmMax) < roundLimit {
		hi := magicBits + uint32(nmax)
		if nonNeg && ia >= 0 && ib >= 0 {
			// Every product is >= 0, so the bits are never below
			// magicBits and only the upper clamp is needed.
			for i, v := range xm {
				a := min(math.Float32bits(float32(ia*v)+roundMagic), hi)
				b := min(math.Float32bits(float32(ib*v)+roundMagic), hi)
				da |= a ^ lb[i]
				db |= a ^ b
				la[i], lb[i] = a, b
			}
			return da != 0, db != 0
		}
		for i, v := range xm {
			a := math.Float32bits(float32(ia*v) + roundMagic)
			b := math.Float32bits(float32(ib*v) + roundMagic)
			a = min(max(a, magicBits), hi)
			b = min(max(b, magicBits), hi)
			da |= a ^ lb[i]
			db |= a ^ b
			la[i], lb[i] = a, b
		}
		return da != 0, db != 0
	}
	for i, v := range xm {
		a := magicBits + uint32(clampInt32(cNearestInt(float32(ia*v)), 0, nmax))
		b := magicBits + uint32(clampInt32(cNearestInt(float32(ib*v)), 0, nmax))
		da |= a ^ lb[i]
		db |= a ^ b
		la[i], lb[i] = a, b
	}
	return da != 0, db != 0
}

// qkxSums2 is qkxSums for two candidates at once, so that their six
// dependency chains overlap.
//
//go:noinline
func qkxSums2(x, w, fa, fb []float32, la, lb []uint32) (aL, aL2, aXL, bL, bL2, bXL float32) {
	n := len(x)
	w, fa, fb, la, lb = w[:n], fa[:n], fb[:n], la[:n], lb[:n]
	for i, v := range x {
		ra := math.Float32frombits(la[i]) - roundMagic
		rb := math.Float32frombits(lb[i]) - roundMagic
		fa[i], fb[i] = ra, rb
		wi := w[i]
		wa := float32(wi * ra)
		wb := float32(wi * rb)
		aL += wa
		bL += wb
		aL2 += float32(wa * ra)
		bL2 += float32(wb * rb)
		aXL += float32(wa * v)
		bXL += float32(wb * v)
	}
	return aL, aL2, aXL, bL, bL2, bXL
}

// qkxError2 is qkxError for two candidates at once.
//
//go:noinline
func qkxError2(x, w, fa, fb []float32, sa, ma, sb, mb float32, useMad bool) (ea, eb float32) {
	n := len(x)
	w, fa, fb = w[:n], fa[:n], fb[:n]
	if useMad {
		for i, v := range x {
			da := float32(sa*fa[i]) + ma - v
			db := float32(sb*fb[i]) + mb - v
			ea += float32(w[i] * cFabs(da))
			eb += float32(w[i] * cFabs(db))
		}
		return ea, eb
	}
	for i, v := range x {
		da := float32(sa*fa[i]) + ma - v
		db := float32(sb*fb[i]) + mb - v
		ea += float32(w[i] * float32(da*da))
		eb += float32(w[i] * float32(db*db))
	}
	return ea, eb
}

// qkxSums turns the levels in lb into floats in lf and returns their
// weighted sums of l, l^2 and l*x in ggml's order.
//
//go:noinline
func qkxSums(x, w, lf []float32, lb []uint32) (sumL, sumL2, sumXL float32) {
	n := len(x)
	w, lf, lb = w[:n], lf[:n], lb[:n]
	for i, b := range lb {
		r := math.Float32frombits(b) - roundMagic
		lf[i] = r
		wl := float32(w[i] * r)
		sumL += wl
		sumL2 += float32(wl * r)
		sumXL += float32(wl * x[i])
	}
	return sumL, sumL2, sumXL
}

// qkxError is a candidate's weighted error: absolute with useMad, squared
// otherwise.
//
//go:noinline
func qkxError(x, w, lf []float32, scale, vmin float32, useMad bool) float32 {
	n := len(x)
	w, lf = w[:n], lf[:n]
	var e float32
	if useMad {
		for i, v := range x {
			diff := float32(scale*lf[i]) + vmin - v
			e += float32(w[i] * cFabs(diff))
		}
		return e
	}
	for i, v := range x {
		diff := float32(scale*lf[i]) + vmin - v
		e += float32(w[i] * float32(diff*diff))
	}
	return e
}

// makeQpQuants is ggml's make_qp_quants: it quantizes the non-negative
// sub-block scales x to levels 0..nmax under the weights qw (a coarse search
// over nine scales, then up to five single-element refinement passes) and
// returns the super-block scale. Level arithmetic follows ggml's int and
// uint8_t conversions exactly, including the wrap of a negative level.
func makeQpQuants(nmax int32, x []float32, L []uint8, qw []float32) float32 {
	n := len(x)
	L = L[:n]
	qw = qw[:n]
	var vmax float32
	for _, v := range x {
		if !(vmax > v) { // ggml's MAX(max, x[i]) keeps x[i] when the test fails
			vmax = v
		}
	}
	if vmax < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	fn := float32(nmax)
	iscale := fn / vmax
	for i, v := range x {
		L[i] = uint8(cNearestInt(float32(iscale * v)))
	}
	scale := 1 / iscale
	var bestMSE float32
	for i, v := range x {
		diff := v - float32(scale*float32(L[i]))
		bestMSE += float32(float32(qw[i]*diff) * diff)
	}
	for is := int32(-4); is <= 4; is++ {
		if is == 0 {
			continue
		}
		iscaleIs := (float32(float32(0.1)*float32(is)) + fn) / vmax
		scaleIs := 1 / iscaleIs
		var mse float32
		for i, v := range x {
			l := min(nmax, cNearestInt(float32(iscaleIs*v)))
			diff := v - float32(scaleIs*float32(l))
			mse += float32(float32(qw[i]*diff) * diff)
		}
		if mse < bestMSE {
			bestMSE = mse
			iscale = iscaleIs
		}
	}
	var sumlx, suml2 float32
	for i, v := range x {
		l := min(nmax, cNearestInt(float32(iscale*v)))
		L[i] = uint8(l)
		fl := float32(l)
		w := qw[i]
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	for range 5 {
		changed := false
		for i, v := range x {
			w := qw[i]
			li := float32(L[i])
			slx := sumlx - float32(float32(w*v)*li)
			sl2 := suml2 - float32(float32(w*li)*li)
			if slx > 0 && sl2 > 0 {
				nl := min(nmax, cNearestInt(float32(v*sl2)/slx))
				if nl != int32(L[i]) {
					fl := float32(nl)
					slx += float32(float32(w*v) * fl)
					sl2 += float32(float32(w*fl) * fl)
					if float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
						L[i] = uint8(nl)
						sumlx, suml2 = slx, sl2
						changed = true
					}
				}
			}
		}
		if !changed {
			break
		}
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

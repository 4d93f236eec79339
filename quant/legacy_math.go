package quant

import (
	"encoding/binary"
	"math"
)

// Scalar helpers with the exact semantics of the C expressions in ggml's
// quantizers, as gcc compiles them for x86-64 (SSE arithmetic, no fused
// multiply-adds). Out-of-range float-to-integer conversions are undefined
// in C; gcc emits cvttss2si, which yields 0x80000000 (0x8000000000000000
// for 64 bits), and these helpers reproduce that on every platform so that
// NaN and Inf inputs give the same bytes as ggml on x86-64.
//
// Every product that feeds an addition is wrapped in float32(...): the Go
// spec makes an explicit conversion round, which forbids fusing it into a
// multiply-add on platforms (arm64, ppc64, s390x) where Go may fuse.

// cFabs is fabsf: it clears the sign bit, so NaN stays NaN.
func cFabs(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// cCvtt is the truncating float-to-int32 conversion of x86 (cvttss2si):
// NaN and values outside the int32 range give math.MinInt32.
func cCvtt(f float32) int32 {
	if f >= -0x1p31 && f < 0x1p31 {
		return int32(f)
	}
	return math.MinInt32
}

// cRoundf is roundf (halves away from zero) followed by the truncating
// conversion to int32 that a store into an integer performs.
func cRoundf(f float32) int32 {
	if !(f >= -0x1p31 && f < 0x1p31) {
		return math.MinInt32
	}
	r := int32(f)
	// f - float32(r) is exact: both have the same exponent or r is 0.
	if d := f - float32(r); d >= 0.5 {
		r++
	} else if d <= -0.5 {
		r--
	}
	return r
}

// cLroundf is lroundf as glibc computes it on x86-64 (NaN and out-of-range
// values give LONG_MIN), truncated to a 32-bit int as `int x = lroundf(v)`
// does.
func cLroundf(f float32) int32 {
	if !(f >= -0x1p63 && f < 0x1p63) {
		return 0 // the low 32 bits of LONG_MIN
	}
	if !(f >= -0x1p31 && f < 0x1p31) {
		// Beyond 2^23 every float is an integer; keep the low 32 bits.
		return int32(int64(f))
	}
	return cRoundf(f)
}

// cNearestInt is ggml's nearest_int: it rounds by adding 1.5·2^23 and
// reading the mantissa bits, which rounds half to even for |f| < 2^22 and
// gives a deterministic (if meaningless) result otherwise.
func cNearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// cSqrtf is sqrtf; rounding the float64 square root to float32 gives the
// correctly rounded float32 result.
func cSqrtf(f float32) float32 { return float32(math.Sqrt(float64(f))) }

// putHalf stores f as a little-endian f16 the way GGML_FP32_TO_FP16 does.
func putHalf(dst []byte, f float32) { binary.LittleEndian.PutUint16(dst, F32ToF16(f)) }

// half reads a little-endian f16 as GGML_FP16_TO_FP32 does.
func half(src []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(src)) }

// rowSigma2 is the mean square of a row, summed in order in float32 as
// ggml's weighted legacy quantizers compute it.
func rowSigma2(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += float32(v * v)
	}
	return s / float32(len(x))
}

// qxWeightedScale is ggml's make_qx_quants with rmse_type 1 and importance
// weights qw, for a block of 32: it picks the scale of a symmetric grid
// [-nmax, nmax-1] that maximises the weighted fit, trying 19 grids around
// nmax/max, and writes the levels (offset by nmax) to L.
func qxWeightedScale(nmax int32, x *[32]float32, L *[32]int8, qw *[32]float32) float32 {
	var xmax, amax float32
	for _, v := range x {
		if ax := cFabs(v); ax > amax {
			amax, xmax = ax, v
		}
	}
	if amax < 1e-15 { // GROUP_MAX_EPS: all zero
		*L = [32]int8{}
		return 0
	}
	fmax := float32(nmax)
	iscale := float32(-nmax) / xmax
	var sumlx, suml2 float32
	for i, v := range x {
		l := min(max(-nmax, cNearestInt(iscale*v)), nmax-1)
		L[i] = int8(l + nmax)
		w, fl := qw[i], float32(l)
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	var aux [32]int8
	for is := int32(-9); is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fmax + float32(0.1*float32(is))) / xmax
		sumlx, suml2 = 0, 0
		for i, v := range x {
			l := min(max(-nmax, cNearestInt(iscale*v)), nmax-1)
			aux[i] = int8(l + nmax)
			w, fl := qw[i], float32(l)
			sumlx += float32(float32(w*v) * fl)
			suml2 += float32(float32(w*fl) * fl)
		}
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			*L = aux
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// qkx3WeightedScale is ggml's make_qkx3_quants for a block of 32 with
// importance weights, rmin -0.9, rdelta 0.05, 36 steps and squared error:
// it fits levels [0, nmax] with a scale and a non-positive offset, writes
// the levels to L and returns the scale and the negated offset.
func qkx3WeightedScale(nmax int32, x *[32]float32, w *[32]float32, L *[32]uint8) (scale, theMin float32) {
	const rmin, rdelta, nstep = -0.9, 0.05, 36
	mn, mx := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < 32; i++ {
		if x[i] < mn {
			mn = x[i]
		}
		if x[i] > mx {
			mx = x[i]
		}
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	if mn > 0 {
		mn = 0
	}
	if mx <= mn {
		*L = [32]uint8{}
		return 0, -mn
	}
	fmax := float32(nmax)
	iscale := fmax / (mx - mn)
	scale = 1 / iscale
	var bestMad float32
	for i, v := range x {
		l := min(max(0, cNearestInt(iscale*(v-mn))), nmax)
		L[i] = uint8(l)
		diff := float32(scale*float32(l)) + mn - v
		bestMad += float32(w[i] * float32(diff*diff))
	}
	var aux [32]uint8
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + fmax) / (mx - mn)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l := min(max(0, cNearestInt(iscale*(v-mn))), nmax)
			aux[i] = uint8(l)
			wl := float32(w[i] * float32(l))
			sumL += wl
			sumL2 += float32(wl * float32(l))
			sumXL += float32(wl * v)
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var mad float32
			for i, v := range x {
				diff := float32(thisScale*float32(aux[i])) + thisMin - v
				mad += float32(w[i] * float32(diff*diff))
			}
			if mad < bestMad {
				*L = aux
				bestMad = mad
				scale = thisScale
				mn = thisMin
			}
		}
	}
	return scale, -mn
}

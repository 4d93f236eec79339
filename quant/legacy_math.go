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
	// Round the argument explicitly: callers pass products (x*id), and once
	// inlined the compiler could otherwise fuse them into f - float32(r).
	f = float32(f)
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
func putHalf(dst []byte, f float32) { binary.LittleEndian.PutUint16(dst, f32ToF16Fast(f)) }

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

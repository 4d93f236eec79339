package quant

import (
	"encoding/binary"
	"math"
)

// This file holds the scalar and row conversions between float32 and the
// 16-bit floats ggml stores (f16, bf16). They match ggml bit for bit,
// including its NaN handling, so that an f16 or bf16 tensor written by sdtool
// has the bytes ggml_quantize_chunk would write.

// F16ToF32 widens an IEEE half to float32. Every non-NaN value is exact. A
// NaN keeps its sign and payload and gets the quiet bit, which is what ggml's
// arithmetic conversion produces on x86 and arm64.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && man == 0:
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7fc00000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	default:
		// A subnormal half is man * 2^-24, exact in float32.
		return math.Float32frombits(sign | math.Float32bits(float32(man)*0x1p-24))
	}
}

// F32ToF16 rounds a float32 to the nearest IEEE half, ties to even, as
// ggml_fp32_to_fp16 does: values beyond the half range become ±Inf, and
// every NaN becomes sign|0x7E00.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return sign | 0x7e00
	case a >= 0x477ff000: // 65520 and up round to Inf (65504 has an odd mantissa)
		return sign | 0x7c00
	case a >= 0x38800000: // a normal half (2^-14 and up)
		a -= 112 << 23 // rebias the exponent from 127 to 15
		a += 0xfff + (a>>13)&1
		return sign | uint16(a>>13)
	default:
		// Subnormal or zero: adding 0.5 leaves the value's bits counted in
		// units of 2^-24 (the ulp of 0.5), rounded to nearest even by the
		// FPU. A result of 0x400 is the smallest normal, which is right.
		v := math.Float32frombits(a) + 0.5
		return sign | uint16(math.Float32bits(v)-0x3f000000)
	}
}

// BF16ToF32 widens a bfloat16 to float32 exactly (NaNs keep their bits).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds a float32 to bfloat16, ties to even, as
// ggml_fp32_to_bf16 does: a NaN keeps its top 16 bits with the quiet bit
// (0x40) set; finite values that round past the largest bfloat16 become Inf.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F32ToF16Row encodes min(len(src), len(dst)/2) floats as little-endian
// halves with F32ToF16 and returns how many it encoded.
func F32ToF16Row(dst []byte, src []float32) int {
	n := min(len(src), len(dst)/2)
	dst, src = dst[:2*n], src[:n]
	i := f16Rows(dst, src)
	for ; i+4 <= n; i += 4 {
		x := (*[4]float32)(src[i:])
		b0, b1, b2, b3 := math.Float32bits(x[0]), math.Float32bits(x[1]), math.Float32bits(x[2]), math.Float32bits(x[3])
		// The normal half range 2^-14 <= |f| < 65520, which nearly every
		// weight is in, is rounded here inline; anything else goes
		// through F32ToF16.
		const lo, span = 0x38800000, 0x477ff000 - 0x38800000
		if max(b0&0x7fffffff-lo, b1&0x7fffffff-lo, b2&0x7fffffff-lo, b3&0x7fffffff-lo) >= span {
			h := uint64(F32ToF16(x[0])) | uint64(F32ToF16(x[1]))<<16 | uint64(F32ToF16(x[2]))<<32 | uint64(F32ToF16(x[3]))<<48
			binary.LittleEndian.PutUint64(dst[2*i:], h)
			continue
		}
		h := uint64(f16Normal(b0)) | uint64(f16Normal(b1))<<16 | uint64(f16Normal(b2))<<32 | uint64(f16Normal(b3))<<48
		binary.LittleEndian.PutUint64(dst[2*i:], h)
	}
	for ; i < n; i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(src[i]))
	}
	return n
}

// f16Normal rounds float bits whose magnitude is in the normal half range
// to the nearest half, ties to even (the normal case of F32ToF16).
func f16Normal(b uint32) uint16 {
	a := b&0x7fffffff - 112<<23 // rebias the exponent from 127 to 15
	a += 0xfff + (a>>13)&1
	return uint16(b>>16)&0x8000 | uint16(a>>13)
}

// f32ToF16Fast is F32ToF16 with the normal range checked first, for the
// single conversions of block scales.
func f32ToF16Fast(f float32) uint16 {
	if b := math.Float32bits(f); b&0x7fffffff-0x38800000 < 0x477ff000-0x38800000 {
		return f16Normal(b)
	}
	return F32ToF16(f)
}

// F16ToF32Row decodes min(len(dst), len(src)/2) little-endian halves with
// F16ToF32 and returns how many it decoded.
func F16ToF32Row(dst []float32, src []byte) int {
	n := min(len(dst), len(src)/2)
	dst, src = dst[:n], src[:2*n]
	for i := f16Decode(dst, src); i < n; i++ {
		h := binary.LittleEndian.Uint16(src[2*i:])
		if e := h >> 10 & 0x1f; e != 0 && e != 0x1f {
			// A normal half (nearly every weight): rebias the exponent and
			// widen the mantissa inline.
			dst[i] = math.Float32frombits(uint32(h&0x8000)<<16 | (uint32(h&0x7fff)<<13 + 112<<23))
			continue
		}
		dst[i] = F16ToF32(h)
	}
	return n
}

// F32ToBF16Row encodes min(len(src), len(dst)/2) floats as little-endian
// bfloat16 with F32ToBF16 and returns how many it encoded.
func F32ToBF16Row(dst []byte, src []float32) int {
	n := min(len(src), len(dst)/2)
	dst, src = dst[:2*n], src[:n]
	i := bf16Rows(dst, src)
	for ; i+4 <= n; i += 4 {
		x := (*[4]float32)(src[i:])
		// Two floats per 64-bit word: neither the NaN test nor the
		// rounding of a non-NaN value carries out of its 32-bit lane.
		v0 := uint64(math.Float32bits(x[0])) | uint64(math.Float32bits(x[1]))<<32
		v1 := uint64(math.Float32bits(x[2])) | uint64(math.Float32bits(x[3]))<<32
		const abs, nanAdd, top = 0x7fffffff7fffffff, 0x007fffff007fffff, 0x8000000080000000
		if ((v0&abs+nanAdd)|(v1&abs+nanAdd))&top != 0 {
			// A NaN among the four: F32ToBF16 keeps its payload.
			h := uint64(F32ToBF16(x[0])) | uint64(F32ToBF16(x[1]))<<16 |
				uint64(F32ToBF16(x[2]))<<32 | uint64(F32ToBF16(x[3]))<<48
			binary.LittleEndian.PutUint64(dst[2*i:], h)
			continue
		}
		const half, one = 0x00007fff00007fff, 0x0000000100000001
		r0 := v0 + half + (v0>>16)&one
		r1 := v1 + half + (v1>>16)&one
		h := (r0>>16)&0xffff | (r0>>32)&0xffff0000 | (r1<<16)&0xffff00000000 | r1&0xffff000000000000
		binary.LittleEndian.PutUint64(dst[2*i:], h)
	}
	for ; i < n; i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(src[i]))
	}
	return n
}

// BF16ToF32Row decodes min(len(dst), len(src)/2) little-endian bfloat16
// values and returns how many it decoded.
func BF16ToF32Row(dst []float32, src []byte) int {
	n := min(len(dst), len(src)/2)
	dst, src = dst[:n], src[:2*n]
	i := 0
	for ; i+4 <= n; i += 4 {
		v := binary.LittleEndian.Uint64(src[2*i:])
		y := (*[4]float32)(dst[i:])
		y[0] = math.Float32frombits(uint32(v) << 16)
		y[1] = math.Float32frombits(uint32(v>>16) << 16)
		y[2] = math.Float32frombits(uint32(v>>32) << 16)
		y[3] = math.Float32frombits(uint32(v>>48) << 16)
	}
	for ; i < n; i++ {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
	return n
}

package quant

import "math"

// This file decodes the 8-, 4-bit float dtypes of safetensors and encodes the
// two that ComfyUI writes (F8_E4M3, F8_E5M2). Decoding goes through 256-entry
// tables built from the bit layouts at start-up.
//
// Layouts (sign, exponent, mantissa bits; bias):
//   - F8_E4M3 (float8_e4m3fn): 1/4/3, bias 7, no Inf, 0x7F and 0xFF are NaN,
//     largest finite 448, subnormals m·2^-9.
//   - F8_E5M2: 1/5/2, bias 15, IEEE (the top byte of an f16): 0x7C is Inf,
//     0x7D..0x7F NaN, largest finite 57344.
//   - F8_E4M3FNUZ: 1/4/3, bias 8, no Inf, no negative zero: 0x80 is the only
//     NaN, largest finite 240, subnormals m·2^-10.
//   - F8_E5M2FNUZ: 1/5/2, bias 16, no Inf, no negative zero: 0x80 is the only
//     NaN, largest finite 57344, subnormals m·2^-17.
//   - F8_E8M0 (float8_e8m0fnu): an unsigned exponent, 2^(e-127); 0xFF is NaN.
//   - F4 (float4_e2m1fn_x2): 1/2/1, bias 1, no Inf or NaN, values 0, 0.5, 1,
//     1.5, 2, 3, 4, 6; two per byte, the first element in the low nibble.

var (
	e4m3Table     [256]float32
	e5m2Table     [256]float32
	e4m3fnuzTable [256]float32
	e5m2fnuzTable [256]float32
	e8m0Table     [256]float32
	f4Table       [16]float32
)

func init() {
	nan := float32(math.NaN())
	for i := range 256 {
		b := byte(i)
		e4m3Table[i] = minifloat(b, 4, 3, 7)
		e5m2Table[i] = F16ToF32(uint16(b) << 8)
		e4m3fnuzTable[i] = minifloat(b, 4, 3, 8)
		e5m2fnuzTable[i] = minifloat(b, 5, 2, 16)
		if i == 0xff {
			e8m0Table[i] = nan
		} else {
			e8m0Table[i] = float32(math.Ldexp(1, i-127))
		}
	}
	e4m3Table[0x7f], e4m3Table[0xff] = nan, float32(math.Copysign(math.NaN(), -1))
	// FNUZ: 0x80 ("negative zero") is the NaN; exponent all ones is finite.
	e4m3fnuzTable[0x80], e5m2fnuzTable[0x80] = nan, nan
	for i := range 16 {
		f4Table[i] = minifloat(byte(i&7)|byte(i&8)<<4, 2, 1, 1)
	}
}

// minifloat decodes the finite reading of b as a sign bit (bit 7), then
// ebits of exponent and mbits of mantissa (the low bits), with the given
// bias; exponent 0 is subnormal. Special codes are patched by the caller.
func minifloat(b byte, ebits, mbits, bias int) float32 {
	man := int(b) & (1<<mbits - 1)
	exp := int(b) >> mbits & (1<<ebits - 1)
	var v float64
	if exp == 0 {
		v = math.Ldexp(float64(man), 1-bias-mbits)
	} else {
		v = math.Ldexp(float64(1<<mbits|man), exp-bias-mbits)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// F8E4M3ToF32 decodes a float8_e4m3fn code exactly (0x7F/0xFF are NaN).
func F8E4M3ToF32(b byte) float32 { return e4m3Table[b] }

// F8E5M2ToF32 decodes a float8_e5m2 code exactly.
func F8E5M2ToF32(b byte) float32 { return e5m2Table[b] }

// F8E4M3FNUZToF32 decodes a float8_e4m3fnuz code exactly (0x80 is NaN).
func F8E4M3FNUZToF32(b byte) float32 { return e4m3fnuzTable[b] }

// F8E5M2FNUZToF32 decodes a float8_e5m2fnuz code exactly (0x80 is NaN).
func F8E5M2FNUZToF32(b byte) float32 { return e5m2fnuzTable[b] }

// E8M0ToF32 decodes a float8_e8m0fnu code: 2^(b-127), NaN for 0xFF.
func E8M0ToF32(b byte) float32 { return e8m0Table[b] }

// F4E2M1ToF32 decodes the low nibble of b as an E2M1 float4.
func F4E2M1ToF32(b byte) float32 { return f4Table[b&15] }

// F32ToF8E4M3 rounds f to float8_e4m3fn, ties to even, saturating: finite
// values and ±Inf beyond ±448 become ±448 (0x7E/0xFE), as ComfyUI's clamp
// before the cast does, and a NaN becomes 0x7F with f's sign (0x7F or 0xFF).
func F32ToF8E4M3(f float32) byte {
	b := math.Float32bits(f)
	sign := byte(b>>24) & 0x80
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return sign | 0x7f
	case a >= 0x43e00000: // 448 and up, Inf included
		return sign | 0x7e
	case a >= 0x3c800000: // 2^-6, the smallest normal
		a -= 120 << 23 // rebias from 127 to 7
		a += 1<<19 - 1 + (a>>20)&1
		return sign | byte(a>>20)
	default:
		// Count units of 2^-9 (the ulp of 2^14) with one FPU rounding.
		v := math.Float32frombits(a) + 0x1p14
		return sign | byte(math.Float32bits(v)-0x46800000)
	}
}

// F32ToF8E5M2 rounds f to float8_e5m2, ties to even, saturating: finite
// values beyond ±57344 become ±57344 (0x7B/0xFB), ±Inf stays ±Inf
// (0x7C/0xFC), and a NaN becomes 0x7E with f's sign.
func F32ToF8E5M2(f float32) byte {
	b := math.Float32bits(f)
	sign := byte(b>>24) & 0x80
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return sign | 0x7e
	case a == 0x7f800000:
		return sign | 0x7c
	case a >= 0x47600000: // 57344 and up
		return sign | 0x7b
	case a >= 0x38800000: // 2^-14, the smallest normal
		a -= 112 << 23 // rebias from 127 to 15
		a += 1<<20 - 1 + (a>>21)&1
		return sign | byte(a>>21)
	default:
		// Count units of 2^-16 (the ulp of 2^7) with one FPU rounding.
		v := math.Float32frombits(a) + 0x1p7
		return sign | byte(math.Float32bits(v)-0x43000000)
	}
}

package quant

// Experimental codecs for the ggml types that the linked ggml does not know:
// nvfp4 (id 40), q1_0 (id 41) and q2_0 (id 42). Their layouts come from
// upstream ggml's ggml-common.h and dequantizers; there is no linked oracle,
// so they are registered Experimental and tested by round trip and by
// hand-built blocks.
//
// nvfp4: 64 elements in 36 bytes. Bytes 0..3 are one UE4M3 scale per 16
// elements (unsigned, 4 exponent bits with bias 7, 3 mantissa bits; 0x00 and
// 0x7F decode to 0). Bytes 4..35 hold 4-bit E2M1 codes: byte 4+8s+j has
// element 16s+j in its low nibble and element 16s+j+8 in its high nibble.
// Element value = kvalues_mxfp4[code] * ue4m3(scale)/2, the same doubled
// E2M1 table as mxfp4 ({0, 1, 2, 3, 4, 6, 8, 12} and negatives). The
// quantizer is upstream's reference (quantize_row_nvfp4_ref): per 16
// elements, scale = UE4M3(amax/6) rounded as ggml_fp32_to_ue4m3 does (half
// up, 448 at most, exponent 15 saturating to 0x7E), then the nearest level
// (first on ties). It ignores importance weights, as upstream does. NaN and
// ±Inf elements encode as code 0 (every distance to them is NaN or Inf, so
// the first level stays); NaN is skipped when finding amax, and ±Inf
// saturates the scale to 0x7E.
//
// q1_0: 128 elements in 18 bytes: f16 d, then 16 bytes of sign bits, element
// j in bit j%8 of byte j/8 (set means +d, clear means -d). The quantizer is
// upstream's reference: d = f16(sum|x| / 128) (the L2-optimal scale for
// signs), bit set when x >= 0 (so -0 is +d and NaN is -d). Weights are
// ignored, as upstream does. A NaN element makes d NaN (0x7E00), so the
// whole block decodes to NaN; ±Inf makes d +Inf.
//
// q2_0: 64 elements in 18 bytes: f16 d, then 16 bytes of 2-bit codes,
// element j in bits 2(j%4)..2(j%4)+1 of byte j/4; code c decodes to
// (c-1)*d, so the levels are -d, 0, d and 2d. Upstream's reference
// quantizer was not available to check against, so sdtool defines its own:
// NaN counts as 0 and ±Inf as ±MaxFloat32; m = max(-min, max/2) is the
// smallest scale that needs no clipping; each of the candidates m*k/16 for
// k = 16, 15, ..., 8, rounded to f16 (65504 where that overflows, zero
// candidates skipped), encodes every element to clamp(round(x/d), -1, 2)
// (halves away from zero), and the candidate with the smallest
// (importance-weighted, float32-accumulated) squared error wins, the larger
// scale on ties. A block without a usable scale is d = 0 with every code 1.
// So a block whose values lie on a q2_0 grid is reproduced exactly, and a
// ternary block {-s, 0, s} gets d = s.

import (
	"encoding/binary"
	"math"

	"github.com/sdtool/sdtool/formats"
)

const (
	nvfp4Elems, nvfp4Bytes = 64, 36
	q1_0Elems, q1_0Bytes   = 128, 18
	q2_0Elems, q2_0Bytes   = 64, 18
)

func init() {
	Register(Codec{Type: formats.NVFP4, Quantize: quantizeNVFP4, Dequantize: dequantizeNVFP4, Experimental: true})
	Register(Codec{Type: formats.Q1_0, Quantize: quantizeQ1_0, Dequantize: dequantizeQ1_0, Experimental: true})
	Register(Codec{Type: formats.Q2_0, Quantize: quantizeQ2_0, Dequantize: dequantizeQ2_0, UsesWeights: true, Experimental: true})
}

// ue4m3Half holds the decoded value of every UE4M3 byte, halved to match the
// doubled E2M1 levels (ggml_ue4m3_to_fp32). The top bit is not part of the
// format and is ignored; 0x7F, the NaN pattern, decodes to 0.
var ue4m3Half = func() (t [256]float32) {
	for i := range t {
		x := uint8(i)
		if x == 0 || x == 0x7f {
			continue
		}
		exp, man := int(x>>3)&0xf, float64(x&7)
		raw := math.Ldexp(man, -9) // subnormal: man * 2^-9
		if exp != 0 {
			raw = math.Ldexp(1+man/8, exp-7)
		}
		t[i] = float32(raw * 0.5)
	}
	return t
}()

// f32ToUE4M3 rounds a positive scale to UE4M3 as ggml_fp32_to_ue4m3 does:
// non-positive and NaN give 0, values are clamped to 448, the mantissa is
// rounded half up, and an exponent of 15 or more saturates to 0x7E.
func f32ToUE4M3(x float32) uint8 {
	if !(x > 0) {
		return 0
	}
	x = min(x, 448)
	bits := math.Float32bits(x)
	exp := int(bits>>23&0xff) - 127 + 7
	man := int(bits >> 20 & 7)
	if exp <= 0 {
		m := int(float32(x*512) + 0.5) // subnormal: man * 2^-9, truncated after adding a half
		if m > 7 {
			m = 7
		}
		if m < 1 {
			return 0
		}
		return uint8(m)
	}
	if exp >= 15 {
		return 0x7e
	}
	man += int(bits >> 19 & 1)
	if man > 7 {
		man = 0
		exp++
		if exp >= 15 {
			return 0x7e
		}
	}
	return uint8(exp<<3 | man)
}

func quantizeNVFP4(dst []byte, src, _ []float32) {
	nb := len(src) / nvfp4Elems
	dst = dst[:nb*nvfp4Bytes]
	for i := range nb {
		b := dst[i*nvfp4Bytes : (i+1)*nvfp4Bytes]
		for s := range 4 {
			x := src[i*nvfp4Elems+16*s : i*nvfp4Elems+16*s+16]
			amax := float32(0)
			for _, v := range x {
				if a := abs32(v); amax < a {
					amax = a
				}
			}
			u := f32ToUE4M3(amax / 6)
			d := ue4m3Half[u]
			b[s] = u
			for j := range 8 {
				b[4+8*s+j] = nvfp4Nearest(x[j], d) | nvfp4Nearest(x[j+8], d)<<4
			}
		}
	}
}

// abs32 is fabsf: the magnitude of v with the sign bit cleared.
func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// nvfp4Nearest is ggml's best_index_mxfp4, which nvfp4 shares with mxfp4:
// the first E2M1 level with the smallest |level·d - x|, the product rounded
// to float32 before the subtraction (no fused multiply-add). It is kept
// apart from mxfp4's copy so that either can be optimised on its own.
func nvfp4Nearest(x, d float32) uint8 {
	best := uint8(0)
	bestErr := abs32(float32(float32(mxfp4Values[0])*d) - x)
	for i := 1; i < 16; i++ {
		if err := abs32(float32(float32(mxfp4Values[i])*d) - x); err < bestErr {
			best, bestErr = uint8(i), err
		}
	}
	return best
}

func dequantizeNVFP4(dst []float32, src []byte) {
	nb := len(src) / nvfp4Bytes
	dst = dst[:nb*nvfp4Elems]
	for i := range nb {
		b := src[i*nvfp4Bytes : (i+1)*nvfp4Bytes]
		for s := range 4 {
			d := ue4m3Half[b[s]]
			y := dst[i*nvfp4Elems+16*s : i*nvfp4Elems+16*s+16]
			for j := range 8 {
				q := b[4+8*s+j]
				y[j] = float32(mxfp4Values[q&0xf]) * d
				y[j+8] = float32(mxfp4Values[q>>4]) * d
			}
		}
	}
}

func quantizeQ1_0(dst []byte, src, _ []float32) {
	nb := len(src) / q1_0Elems
	dst = dst[:nb*q1_0Bytes]
	for i := range nb {
		x := src[i*q1_0Elems : (i+1)*q1_0Elems]
		b := dst[i*q1_0Bytes : (i+1)*q1_0Bytes]
		sum := float32(0)
		for _, v := range x {
			sum += abs32(v)
		}
		binary.LittleEndian.PutUint16(b, F32ToF16(sum/q1_0Elems))
		clear(b[2:])
		for j, v := range x {
			if v >= 0 {
				b[2+j/8] |= 1 << (j % 8)
			}
		}
	}
}

func dequantizeQ1_0(dst []float32, src []byte) {
	nb := len(src) / q1_0Bytes
	dst = dst[:nb*q1_0Elems]
	for i := range nb {
		b := src[i*q1_0Bytes : (i+1)*q1_0Bytes]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		pm := [2]float32{-d, d}
		y := dst[i*q1_0Elems : (i+1)*q1_0Elems]
		for j := range y {
			y[j] = pm[b[2+j/8]>>(j%8)&1]
		}
	}
}

// q2_0Levels maps a q2_0 code to its multiple of d.
var q2_0Levels = [4]float32{-1, 0, 1, 2}

// q2_0Code returns the q2_0 code of x for the scale with inverse id.
func q2_0Code(x, id float32) uint8 {
	v := float32(x * id)
	var l float32
	if v >= 0 {
		l = float32(math.Floor(float64(v) + 0.5))
	} else {
		l = -float32(math.Floor(float64(-v) + 0.5))
	}
	return uint8(min(max(l, -1), 2) + 1)
}

// q2_0Clean maps NaN to 0 and ±Inf to ±MaxFloat32, the inputs sdtool's
// q2_0 quantizer works on.
func q2_0Clean(v float32) float32 {
	switch {
	case v != v:
		return 0
	case v > math.MaxFloat32:
		return math.MaxFloat32
	case v < -math.MaxFloat32:
		return -math.MaxFloat32
	}
	return v
}

func quantizeQ2_0(dst []byte, src, weights []float32) {
	nb := len(src) / q2_0Elems
	dst = dst[:nb*q2_0Bytes]
	for i := range nb {
		x := src[i*q2_0Elems : (i+1)*q2_0Elems]
		var w []float32
		if weights != nil {
			w = weights[i*q2_0Elems : (i+1)*q2_0Elems]
		}
		b := dst[i*q2_0Bytes : (i+1)*q2_0Bytes]
		lo, hi := float32(0), float32(0)
		for _, v := range x {
			v = q2_0Clean(v)
			lo, hi = min(lo, v), max(hi, v)
		}
		m := max(-lo, hi/2)
		bestH, found := uint16(0), false
		bestErr := float32(0)
		for k := 16; k >= 8; k-- {
			h := F32ToF16(m * float32(k) / 16)
			if h == 0x7c00 {
				h = 0x7bff // beyond f16: the largest finite scale, clipping the rest
			}
			d := F16ToF32(h)
			if d == 0 {
				continue
			}
			id := 1 / d
			e := float32(0)
			for j, v := range x {
				v = q2_0Clean(v)
				diff := float32(q2_0Levels[q2_0Code(v, id)]*d) - v
				sq := float32(diff * diff)
				if w != nil {
					sq = float32(w[j] * sq)
				}
				e += sq
			}
			if !found || e < bestErr {
				bestH, bestErr, found = h, e, true
			}
		}
		binary.LittleEndian.PutUint16(b, bestH)
		if !found {
			// All zero, or too small for an f16 scale: every code is 1 (zero).
			for j := 2; j < q2_0Bytes; j++ {
				b[j] = 0x55
			}
			continue
		}
		clear(b[2:])
		id := 1 / F16ToF32(bestH)
		for j, v := range x {
			b[2+j/4] |= q2_0Code(q2_0Clean(v), id) << (2 * (j % 4))
		}
	}
}

func dequantizeQ2_0(dst []float32, src []byte) {
	nb := len(src) / q2_0Bytes
	dst = dst[:nb*q2_0Elems]
	for i := range nb {
		b := src[i*q2_0Bytes : (i+1)*q2_0Bytes]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		y := dst[i*q2_0Elems : (i+1)*q2_0Elems]
		for j := range y {
			y[j] = q2_0Levels[b[2+j/4]>>(2*(j%4))&3] * d
		}
	}
}

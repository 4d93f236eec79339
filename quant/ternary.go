package quant

import (
	"math"

	"github.com/sdtool/sdtool/formats"
)

// The ternary types (BitNet b1.58, TriLMs): 256 elements per block, each
// rounded to -1, 0 or +1 times the block's absolute maximum d (f16). ggml
// ignores importance weights for both.
//
//   - tq1_0 (54 bytes): qs[48] with five trits per byte, then qh[4] with
//     four trits per byte, then d. A byte holds its trits t0..t4 as the
//     number t0·81 + t1·27 + t2·9 + t3·3 + t4 (t = level + 1), mapped to
//     0..255 by a ceiling division (·256/243) so that the trit k can be read
//     back as the top bits of byte·3^k·3. Bytes 0..31 hold elements
//     m + 32n (n = 0..4) of the first 160, bytes 32..47 elements 160 + m + 16n,
//     and qh byte j the elements 240 + j + 4n (n = 0..3, a fifth trit of 0).
//   - tq2_0 (66 bytes): qs[64] with four 2-bit codes (level + 1) per byte,
//     byte m of each 32 holding elements m + 32n at bits 2n, then d.
//
// Rounding is lroundf (halves away from zero). A NaN, or an Inf produced by
// a subnormal d, rounds like glibc's lroundf on x86-64 (LONG_MIN, whose low
// 32 bits are 0), so it encodes as level 0, as ggml's output does.

const (
	tq1Bytes = 54
	tq2Bytes = 66
)

func init() {
	Register(Codec{Type: formats.TQ1_0, Quantize: quantizeTQ1_0, Dequantize: dequantizeTQ1_0})
	Register(Codec{Type: formats.TQ2_0, Quantize: quantizeTQ2_0, Dequantize: dequantizeTQ2_0})
}

// ternaryScale returns the block maximum as ggml computes it with
// MAX(amax, fabsf(v)) (a NaN replaces the running maximum) and its inverse.
func ternaryScale(x *[256]float32) (d, id float32) {
	for _, v := range x {
		if a := cFabs(v); !(d > a) {
			d = a
		}
	}
	if d != 0 {
		id = 1 / d
	}
	return d, id
}

// trit is the code 0, 1 or 2 of x·id, computed as `int xi = lroundf(x*id) + 1`.
func trit(x, id float32) int32 { return cLroundf(x*id) + 1 }

// ternaryTrits computes the codes of a whole block into t. For a block of
// finite values whose inverse scale is finite, every x·id lies within
// [-1-ε, 1+ε], where adding the largest float below 0.5 with the sign of
// x·id and truncating is lroundf (see roundHalf) and the block maximum is
// an integer maximum of the magnitudes' bits; otherwise ggml's own
// semantics run element by element.
func ternaryTrits(t *[256]uint8, x *[256]float32) (d float32) {
	var m0, m1, m2, m3 uint32
	for j := 0; j < 256; j += 4 {
		m0 = max(m0, math.Float32bits(x[j])&^(1<<31))
		m1 = max(m1, math.Float32bits(x[j+1])&^(1<<31))
		m2 = max(m2, math.Float32bits(x[j+2])&^(1<<31))
		m3 = max(m3, math.Float32bits(x[j+3])&^(1<<31))
	}
	amax := max(m0, m1, m2, m3)
	var id float32
	if amax != 0 {
		id = 1 / math.Float32frombits(amax)
	}
	if amax >= 0x7f800000 || math.Float32bits(id) >= 0x7f800000 {
		d, id = ternaryScale(x)
		for j, v := range x {
			t[j] = uint8(trit(v, id))
		}
		return d
	}
	for j, v := range x {
		p := float32(v * id)
		h := math.Float32frombits(roundHalf | math.Float32bits(p)&(1<<31))
		t[j] = uint8(int32(p+h) + 1)
	}
	return math.Float32frombits(amax)
}

// packTrits5 packs five trits (first most significant) into one byte. The
// base-3 number is formed in uint8 arithmetic, as ggml does, which matters
// for the out-of-range codes a NaN-reset block maximum can give.
func packTrits5(t0, t1, t2, t3, t4 uint8) byte {
	q := uint32(t0*81 + t1*27 + t2*9 + t3*3 + t4)
	return uint8((q*256 + 242) / 243)
}

func quantizeTQ1_0(dst []byte, src, _ []float32) {
	nb := len(src) / 256
	dst = dst[:nb*tq1Bytes]
	var t [256]uint8
	for i := range nb {
		y, x := (*[tq1Bytes]byte)(dst[i*tq1Bytes:]), (*[256]float32)(src[i*256:])
		d := ternaryTrits(&t, x)
		for m := range 32 {
			y[m] = packTrits5(t[m], t[m+32], t[m+64], t[m+96], t[m+128])
		}
		for m := range 16 {
			b := 160 + m
			y[32+m] = packTrits5(t[b], t[b+16], t[b+32], t[b+48], t[b+64])
		}
		for j := range 4 {
			b := 240 + j
			// Four trits, then one more (x3) so that they fill the top.
			y[48+j] = packTrits5(t[b], t[b+4], t[b+8], t[b+12], 0)
		}
		putHalf(y[52:], d)
	}
}

// pow3 are the multipliers that bring trit k of a tq1_0 byte to the top.
var pow3 = [6]uint8{1, 3, 9, 27, 81, 243}

// unpackTrit returns trit k of a packed byte as a level -1, 0 or +1.
func unpackTrit(q uint8, k int) float32 {
	q *= pow3[k]
	return float32(int32(uint16(q)*3>>8) - 1)
}

func dequantizeTQ1_0(dst []float32, src []byte) {
	nb := len(dst) / 256
	src = src[:nb*tq1Bytes]
	for i := range nb {
		x, y := (*[tq1Bytes]byte)(src[i*tq1Bytes:]), (*[256]float32)(dst[i*256:])
		d := half(x[52:])
		for n := range 5 {
			for m := range 32 {
				y[n*32+m] = unpackTrit(x[m], n) * d
			}
			for m := range 16 {
				y[160+n*16+m] = unpackTrit(x[32+m], n) * d
			}
		}
		for n := range 4 {
			for j := range 4 {
				y[240+n*4+j] = unpackTrit(x[48+j], n) * d
			}
		}
	}
}

func quantizeTQ2_0(dst []byte, src, _ []float32) {
	nb := len(src) / 256
	dst = dst[:nb*tq2Bytes]
	var t [256]uint8
	for i := range nb {
		y, x := (*[tq2Bytes]byte)(dst[i*tq2Bytes:]), (*[256]float32)(src[i*256:])
		d := ternaryTrits(&t, x)
		for j := 0; j < 64; j += 32 {
			tb := (*[128]uint8)(t[j*4:])
			o := (*[32]byte)(y[j:])
			for m := range o {
				o[m] = tb[m]&3 | (tb[m+32]&3)<<2 | (tb[m+64]&3)<<4 | (tb[m+96]&3)<<6
			}
		}
		putHalf(y[64:], d)
	}
}

func dequantizeTQ2_0(dst []float32, src []byte) {
	nb := len(dst) / 256
	src = src[:nb*tq2Bytes]
	for i := range nb {
		x, y := (*[tq2Bytes]byte)(src[i*tq2Bytes:]), (*[256]float32)(dst[i*256:])
		d := half(x[64:])
		for j := 0; j < 64; j += 32 {
			for l := range 4 {
				for m := range 32 {
					q := int32(x[j+m]>>(2*l)) & 3
					y[j*4+l*32+m] = float32(q-1) * d
				}
			}
		}
	}
}

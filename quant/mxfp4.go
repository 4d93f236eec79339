package quant

import (
	"math"

	"github.com/sdtool/sdtool/formats"
)

// mxfp4 (OCP microscaling FP4): blocks of 32 E2M1 values sharing one E8M0
// exponent. Block: e (u8), qs[16] (byte j: element j low, j+16 high). ggml
// stores the E2M1 levels doubled as integers (mxfp4Values) and halves the
// scale to match. ggml ignores importance weights for mxfp4.
//
// The exponent is floor(log2(amax)) - 2 + 127 computed in float32, as ggml
// does with log2f: an Inf amax gives exponent 0 (the x86 conversion of an
// out-of-range float), and a NaN element is skipped by the maximum and
// encodes as code 0, since no level compares nearer.

const mxfp4Bytes = 17

// mxfp4Values is ggml's kvalues_mxfp4: the E2M1 values times two.
var mxfp4Values = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

func init() {
	Register(Codec{Type: formats.MXFP4, Quantize: quantizeMXFP4, Dequantize: dequantizeMXFP4})
}

// e8m0Half is 2^(e-128), half the E8M0 value, as ggml builds it from bits
// (codes 0 and 1 are float32 subnormals; 0xFF is not treated as NaN).
func e8m0Half(e uint8) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// log2f is log2 rounded to float32. glibc's log2f is not guaranteed to be
// correctly rounded, so the two could differ by an ulp on some input;
// floor() only notices next to a power of two, where both are exact or
// agree (TestMXFP4ExponentEdges checks every power of two against ggml).
func log2f(f float32) float32 { return float32(math.Log2(float64(f))) }

func quantizeMXFP4(dst []byte, src, _ []float32) {
	nb := len(src) / 32
	dst = dst[:nb*mxfp4Bytes]
	for i := range nb {
		y, x := (*[mxfp4Bytes]byte)(dst[i*mxfp4Bytes:]), (*[32]float32)(src[i*32:])
		var amax float32
		if m := absMaxBits(x); m <= 0x7f800000 {
			amax = math.Float32frombits(m)
		} else {
			// A NaN: ggml's "amax < |v|" skips it.
			for _, v := range x {
				if a := cFabs(v); amax < a {
					amax = a
				}
			}
		}
		var e uint8
		if amax > 0 {
			e = uint8(cCvtt(float32(math.Floor(float64(log2f(amax)))) - 2 + 127))
		}
		d := e8m0Half(e)
		y[0] = e
		if e >= 3 && absMaxBits(x) < 0x7f800000 {
			// Finite values and a normal d: nearest levels by thresholds.
			var thr [7]uint32
			for k, m := range mxfp4Mids {
				thr[k] = math.Float32bits(m * d)
			}
			for j := range 16 {
				y[1+j] = mxfp4Code(x[j], &thr) | mxfp4Code(x[j+16], &thr)<<4
			}
			continue
		}
		// The products level·d are the same for every element: form them
		// once (the same roundings ggml performs per comparison).
		var lv [16]float32
		for k, q := range mxfp4Values {
			lv[k] = float32(q) * d
		}
		for j := range 16 {
			y[1+j] = mxfp4NearestLevel(x[j], &lv) | mxfp4NearestLevel(x[j+16], &lv)<<4
		}
	}
}

// mxfp4Mids are the midpoints between consecutive positive mxfp4Values.
var mxfp4Mids = [7]float32{0.5, 1.5, 2.5, 3.5, 5, 7, 10}

// mxfp4Code is mxfp4NearestLevel for a finite x when d is a normal power
// of two (e >= 3), given thr, the bits of mxfp4Mids·d (exact). Near a
// midpoint both of ggml's differences |level·d - x| are exact (the two
// operands are within a factor of two of each other), so the first nearest
// level is the count of midpoints below |x|, a tie going to the lower
// level; bits of non-negative floats order like their values. A negative x
// takes the negative level of that count, but level 0 rather than -0.
func mxfp4Code(x float32, thr *[7]uint32) uint8 {
	b := math.Float32bits(x)
	a := int32(b &^ (1 << 31))
	var k uint32
	for _, t := range thr {
		k += uint32(int32(t)-a) >> 31
	}
	neg := b >> 31 & (uint32(int32(thr[0])-a) >> 31)
	return uint8(k | neg<<3)
}

// mxfp4Nearest is ggml's best_index_mxfp4: the first level with the
// smallest |level·d - x|. (nvfp4 shares it.)
func mxfp4Nearest(x, d float32) uint8 {
	best := uint8(0)
	bestErr := cFabs(float32(float32(mxfp4Values[0])*d) - x)
	for i := 1; i < 16; i++ {
		if err := cFabs(float32(float32(mxfp4Values[i])*d) - x); err < bestErr {
			best, bestErr = uint8(i), err
		}
	}
	return best
}

// mxfp4NearestLevel is mxfp4Nearest with the products level·d formed in
// advance in lv: the first index with the smallest |lv[i] - x|. Levels of the other sign (and its zero) can never
// be nearer than level 0, so only level 0 and the seven levels of x's sign
// are compared, as keys (error bits << 4 | index) whose minimum is the
// first minimum, without branches.
func mxfp4NearestLevel(x float32, lv *[16]float32) uint8 {
	base := int(math.Float32bits(x)>>31) << 3 // 0 for x >= +0, 8 for x <= -0
	best := uint64(math.Float32bits(cFabs(lv[0]-x))) << 4
	for i := 1; i < 8; i++ {
		k := base + i
		best = min(best, uint64(math.Float32bits(cFabs(lv[k&15]-x)))<<4|uint64(k))
	}
	return uint8(best & 15)
}

func dequantizeMXFP4(dst []float32, src []byte) {
	nb := len(dst) / 32
	src = src[:nb*mxfp4Bytes]
	for i := range nb {
		x, y := (*[mxfp4Bytes]byte)(src[i*mxfp4Bytes:]), (*[32]float32)(dst[i*32:])
		d := e8m0Half(x[0])
		for j := range 16 {
			q := x[1+j]
			y[j] = float32(mxfp4Values[q&15]) * d
			y[j+16] = float32(mxfp4Values[q>>4]) * d
		}
	}
}

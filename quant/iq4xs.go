package quant

import (
	"encoding/binary"
	"math"

	"github.com/sdtool/sdtool/formats"
)

// iq4_xs: eight sub-blocks of 32 whose 4-bit codes index the non-linear
// iq4_nl levels below, each with a signed 6-bit scale. Block: f16 d,
// scales_h (uint16: bits 4-5 of sub-block ib's code at bit 2*ib), scales_l[4]
// (low nibbles, two sub-blocks a byte), qs[128] (byte j of each 16 holds
// elements j and j+16 of its sub-block).
const iq4XSBytes = 136

// iq4nlValues is ggml's kvalues_iq4nl, the levels that define iq4_nl and
// iq4_xs.
var iq4nlValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// iq4nlFloats are the iq4_nl levels as floats.
var iq4nlFloats [16]float32

// iq4nlByHalf maps floor(2x)+512 to the index of the level nearest to x,
// for -256 <= x < 256 (see bestIndexIQ4), and iq4nlLevelByHalf to the level
// itself.
var (
	iq4nlByHalf      [1024]uint8
	iq4nlLevelByHalf [1024]float32
)

func init() {
	for i, v := range iq4nlValues {
		iq4nlFloats[i] = float32(v)
	}
	for k := range iq4nlByHalf {
		// Every x with floor(2x) = k-254 lies on the same side of every
		// midpoint, since the midpoints are multiples of 0.5.
		h := k - 512
		n := 0
		for i := range 15 {
			if h >= int(iq4nlValues[i])+int(iq4nlValues[i+1]) {
				n++
			}
		}
		iq4nlByHalf[k] = uint8(n)
		iq4nlLevelByHalf[k] = float32(iq4nlValues[n])
	}
}

// bestIndexIQ4 is ggml's best_index_int8 on the iq4_nl levels: the nearest
// level to x, ties and NaN resolved as ggml's do. ggml bisects to the two
// levels around x and keeps the lower one when x-lo < hi-x. Near a
// midpoint both differences are exact (the operands are within one binade
// of each other), so that comparison is x < (lo+hi)/2, with a tie going up.
// The midpoints are multiples of 0.5, so floor(2x) alone decides, and a
// table indexed by it replaces the bisection and its unpredictable branches
// (TestBestIndexIQ4MatchesBisection checks it against ggml's bisection).
func bestIndexIQ4(x float32) uint8 {
	// Callers pass products (id·x); rounding x explicitly keeps an inlined
	// product from fusing into x + x below.
	x = float32(x)
	if x <= -127 {
		return 0
	}
	if !(x < 113) { // x >= 113, or NaN, which ggml's bisection takes to 15
		return 15
	}
	y := x + x // exact
	t := int32(y)
	if float32(t) > y { // truncation rounded a negative y up
		t--
	}
	return iq4nlByHalf[uint32(t+512)&1023]
}

// iq4Level is the level bestIndexIQ4(x) picks, for |x| < 256, without a
// branch: the table covers the outer levels' ranges too, and floor(2x) is
// the truncation minus the sign bit of the (exact) remainder, which errs
// only for -0, where floor(2x) = -1 and 0 pick the same level.
func iq4Level(x float32) float32 {
	x = float32(x) // as in bestIndexIQ4
	y := x + x
	t := int32(y)
	t -= int32(math.Float32bits(y-float32(t)) >> 31)
	return iq4nlLevelByHalf[uint32(t+512)&1023]
}

func quantizeIQ4XS(dst []byte, src, weights []float32) {
	nb := blocks256(formats.IQ4_XS, dst, src, weights)
	for i := range nb {
		x := (*[qkBlock]float32)(src[i*qkBlock:])
		y := (*[iq4XSBytes]byte)(dst[i*iq4XSBytes:])
		var qw *[qkBlock]float32
		if weights != nil {
			qw = (*[qkBlock]float32)(weights[i*qkBlock:])
		}
		quantizeBlockIQ4XS(y, x, qw)
	}
}

// quantizeBlockIQ4XS is ggml's quantize_row_iq4_nl_impl for a 256-element
// super-block with ntry 7 (both of ggml's iq4_xs paths): per sub-block, the
// weighted least-squares scale over 16 candidates, then 6-bit scale codes
// under d = -max/32 and the levels requantized with the coded scales. The
// weights are qw*sqrt(sigma2+x^2) (sigma2 = 2*mean(x^2)) or x^2 without qw.
func quantizeBlockIQ4XS(y *[iq4XSBytes]byte, x, qw *[qkBlock]float32) {
	var sigma2 float32
	for _, v := range x {
		sigma2 += float32(v * v)
	}
	sigma2 = float32(sigma2 * (2.0 / qkBlock)) // rounded, so that it cannot fuse into sigma2+x^2
	var scales [8]float32
	var weight [32]float32
	var maxScale, amaxScale float32
	for ib := range 8 {
		xb := (*[32]float32)(x[32*ib:])
		if qw != nil {
			wb := (*[32]float32)(qw[32*ib:])
			for j, v := range xb {
				weight[j] = float32(wb[j] * cSqrtf(sigma2+float32(v*v)))
			}
		} else {
			for j, v := range xb {
				weight[j] = float32(v * v)
			}
		}
		var amax, vmax float32
		for _, v := range xb {
			if ax := cFabs(v); ax > amax {
				amax, vmax = ax, v
			}
		}
		if amax < groupMaxEps {
			scales[ib] = 0
			continue
		}
		d := iq4Search(xb, &weight, vmax)
		scales[ib] = d
		if a := cFabs(d); a > amaxScale {
			amaxScale, maxScale = a, d
		}
	}
	d := -maxScale / 32
	putF16(y[0:2], d)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	var scalesH uint16
	sl := (*[4]byte)(y[4:8])
	qs := (*[128]byte)(y[8:])
	for ib := range 8 {
		l := clampInt32(cNearestInt(float32(id*scales[ib])), -32, 31)
		dl := d * float32(l)
		var idl float32
		if dl != 0 {
			idl = 1 / dl
		}
		xb := (*[32]float32)(x[32*ib:])
		var L [32]uint8
		for j, v := range xb {
			L[j] = bestIndexIQ4(idl * v)
		}
		o := (*[16]byte)(qs[16*ib:])
		for j := range o {
			o[j] = L[j] | L[j+16]<<4
		}
		l += 32
		if ib%2 == 0 {
			sl[ib/2] = uint8(l & 0xf)
		} else {
			sl[ib/2] |= uint8(l&0xf) << 4
		}
		scalesH |= uint16(l>>4) << (2 * ib)
	}
	binary.LittleEndian.PutUint16(y[2:4], scalesH)
}

func dequantizeIQ4XS(dst []float32, src []byte) {
	nb := len(dst) / qkBlock
	for i := range nb {
		b := (*[iq4XSBytes]byte)(src[i*iq4XSBytes:])
		y := (*[qkBlock]float32)(dst[i*qkBlock:])
		d := half(b[0:])
		sh := binary.LittleEndian.Uint16(b[2:4])
		for ib := range 8 {
			ls := int32(b[4+ib/2]>>(4*(ib%2))&0xf) | int32(sh>>(2*ib)&3)<<4
			dl := d * float32(ls-32)
			qs := (*[16]byte)(b[8+16*ib:])
			o := (*[32]float32)(y[32*ib:])
			for j, v := range qs {
				o[j] = dl * float32(iq4nlValues[v&0xf])
				o[j+16] = dl * float32(iq4nlValues[v>>4])
			}
		}
	}
}

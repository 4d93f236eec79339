package convrot

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/quant"
)

// Block sizes and limits of ComfyUI's microscaled float formats.
const (
	// NVFP4Block is the number of values that share one FP8 block scale.
	NVFP4Block = 16
	// MXFP8Block is the number of values that share one E8M0 block scale.
	MXFP8Block = 32
	// FP4Max is the largest E2M1 magnitude.
	FP4Max = 6
)

// fp4Values are the E2M1 magnitudes of codes 0..7 (bit 3 is the sign).
var fp4Values = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// FP4Value decodes the low nibble of c as an E2M1 float.
func FP4Value(c byte) float32 {
	v := fp4Values[c&7]
	if c&8 != 0 {
		return -v
	}
	return v
}

// fp4Code rounds x (already divided by its scale) to E2M1, ties to the even
// code, saturating at ±6 and keeping the sign of a value that rounds to
// zero (so -0.1 is code 8), as the reference's bit-level conversion does.
func fp4Code(x float32) byte {
	var sign byte
	if math.Signbit(float64(x)) {
		sign, x = 8, -x
	}
	// Midpoints between consecutive magnitudes; at a midpoint the even code wins.
	switch {
	case x <= 0.25:
		return sign // 0.25 ties down to 0
	case x < 0.75:
		return sign | 1
	case x <= 1.25:
		return sign | 2 // 0.75 ties up to 1 (code 2), 1.25 down to 1
	case x < 1.75:
		return sign | 3
	case x <= 2.5:
		return sign | 4 // 1.75 ties up to 2, 2.5 down to 2
	case x < 3.5:
		return sign | 5
	case x <= 5:
		return sign | 6 // 3.5 ties up to 4, 5 down to 4
	}
	return sign | 7
}

// SwizzledScaleShape returns the stored shape of a block-scale matrix of
// rows x cols scales in the cuBLAS tiled layout ComfyUI keeps: rows padded
// to 128 and columns to 4.
func SwizzledScaleShape(rows, cols int64) []int64 {
	return []int64{(rows + 127) / 128 * 128, (cols + 3) / 4 * 4}
}

// SwizzleIndex returns the position in the stored (swizzled) scale matrix of
// the scale at (r, c), for a matrix whose padded width is paddedCols: the
// matrix is cut in tiles of 128 rows by 4 columns, tiles stored row-major,
// and inside a tile row r = 32i+j, column k sits at 16j+4i+k.
func SwizzleIndex(r, c, paddedCols int64) int64 {
	tile := r/128*(paddedCols/4) + c/4
	rr := r % 128
	return tile*512 + rr%32*16 + rr/32*4 + c%4
}

// NVFP4TensorScale returns the per-tensor scale (weight_scale_2) of a
// tensor whose largest magnitude is amax: amax/(448·6) in float32, floored
// at MinScale so that an all-zero tensor decodes to zeros instead of NaN.
func NVFP4TensorScale(amax float32) float32 {
	s := amax / (FP8E4M3Max * FP4Max)
	if !(s >= MinScale) {
		s = MinScale
	}
	return s
}

// EncodeNVFP4Row quantizes one row (a multiple of 16 values) to NVFP4:
// codes gets len(row)/2 bytes (the first value of each pair in the high
// nibble), scales one float8_e4m3fn code per 16 values (in row order, not
// yet swizzled). Per block: s = fp8(min(amax/6/ts, 448)), total = ts·s, and
// each value is E2M1(clamp(x/total, ±6)); a block whose total is 0 gets
// zero codes. With weights (importance per column, nil for none) the
// block scale is the FP8 value near the nominal one with the least
// weighted squared error; without, it is the reference's nominal scale.
func EncodeNVFP4Row(codes, scales []byte, row []float32, ts float32, weights []float32) error {
	n := len(row)
	if n%NVFP4Block != 0 || len(codes) != n/2 || len(scales) != n/NVFP4Block || weights != nil && len(weights) != n {
		return fmt.Errorf("convrot: nvfp4 row of %d values needs %d code bytes and %d scales", n, n/2, n/NVFP4Block)
	}
	var q [NVFP4Block]byte
	for b := 0; b < n/NVFP4Block; b++ {
		x := row[b*NVFP4Block : (b+1)*NVFP4Block]
		amax, ok := absMax(x)
		if !ok {
			return fmt.Errorf("convrot: a value is NaN or infinite")
		}
		s := quant.F32ToF8E4M3(min(amax/FP4Max/ts, FP8E4M3Max))
		if weights != nil {
			s = bestNVFP4Scale(x, weights[b*NVFP4Block:(b+1)*NVFP4Block], s, ts)
		}
		nvfp4Block(&q, x, ts, s)
		scales[b] = s
		for j := 0; j < NVFP4Block; j += 2 {
			codes[b*NVFP4Block/2+j/2] = q[j]<<4 | q[j+1]
		}
	}
	return nil
}

// nvfp4Block encodes one block with the FP8 scale code s.
func nvfp4Block(q *[NVFP4Block]byte, x []float32, ts float32, s byte) {
	total := ts * quant.F8E4M3ToF32(s)
	for j, v := range x {
		if total == 0 {
			q[j] = 0
			continue
		}
		q[j] = fp4Code(min(max(v/total, -FP4Max), FP4Max))
	}
}

// nvfp4ScaleSteps are the FP8 code offsets bestNVFP4Scale tries, nominal first.
var nvfp4ScaleSteps = [...]int{0, -1, -2, -3, -4, 1, 2}

// bestNVFP4Scale tries the FP8 scale codes from four below to two above the
// nominal one and returns the one with the least importance-weighted
// squared error (the nominal one on ties).
func bestNVFP4Scale(x, w []float32, nominal byte, ts float32) byte {
	best, bestErr := nominal, math.Inf(1)
	var q [NVFP4Block]byte
	for _, d := range nvfp4ScaleSteps {
		c := int(nominal) + d
		if c < 0 || c > 0x7e {
			continue
		}
		nvfp4Block(&q, x, ts, byte(c))
		total := ts * quant.F8E4M3ToF32(byte(c))
		var e float64
		for j, v := range x {
			diff := float64(v - FP4Value(q[j])*total)
			e += float64(w[j]) * diff * diff
		}
		if e < bestErr {
			best, bestErr = byte(c), e
		}
	}
	return best
}

// DecodeNVFP4Row decodes one row: value = E2M1(code)·(ts·fp8(scale)), in
// float32, the product ComfyUI's dequantization computes.
func DecodeNVFP4Row(dst []float32, codes, scales []byte, ts float32) error {
	n := len(dst)
	if n%NVFP4Block != 0 || len(codes) != n/2 || len(scales) != n/NVFP4Block {
		return fmt.Errorf("convrot: nvfp4 row of %d values needs %d code bytes and %d scales", n, n/2, n/NVFP4Block)
	}
	for b := range n / NVFP4Block {
		total := ts * quant.F8E4M3ToF32(scales[b])
		for j := 0; j < NVFP4Block; j += 2 {
			c := codes[b*NVFP4Block/2+j/2]
			dst[b*NVFP4Block+j] = FP4Value(c>>4) * total
			dst[b*NVFP4Block+j+1] = FP4Value(c&15) * total
		}
	}
	return nil
}

// E8M0Value decodes an E8M0 block scale as ComfyUI's kitchen does: 2^(e-127)
// built from the exponent bits, with 0 decoding to 0 (not 2^-127) and 255
// to +Inf.
func E8M0Value(e byte) float32 {
	if e == 0 {
		return 0
	}
	return math.Float32frombits(uint32(e) << 23)
}

// mxfp8Exponent returns the E8M0 code of a block whose largest magnitude is
// amax > 0: ceil(log2(max(amax/448, 2^-127))) + 127, within [0, 254], with
// the logarithm rounded to float32 as the reference computes it.
func mxfp8Exponent(amax float32) byte {
	s := max(amax/FP8E4M3Max, 0x1p-127)
	l := float32(math.Log2(float64(s)))
	e := int(math.Ceil(float64(l))) + 127
	return byte(min(max(e, 0), 254))
}

// EncodeMXFP8Row quantizes one row (a multiple of 32 values) to MXFP8: codes
// gets one float8_e4m3fn code per value, scales one E8M0 code per 32 values
// (row order, not yet swizzled). A block's scale is the power of two that
// brings its largest magnitude to at most 448; an all-zero block gets scale
// code 0 and zero codes. With weights, the next smaller power of two (which
// saturates the largest values) is taken when its weighted squared error is
// smaller.
func EncodeMXFP8Row(codes, scales []byte, row []float32, weights []float32) error {
	n := len(row)
	if n%MXFP8Block != 0 || len(codes) != n || len(scales) != n/MXFP8Block || weights != nil && len(weights) != n {
		return fmt.Errorf("convrot: mxfp8 row of %d values needs %d codes and %d scales", n, n, n/MXFP8Block)
	}
	for b := range n / MXFP8Block {
		x := row[b*MXFP8Block : (b+1)*MXFP8Block]
		q := codes[b*MXFP8Block : (b+1)*MXFP8Block]
		amax, ok := absMax(x)
		if !ok {
			return fmt.Errorf("convrot: a value is NaN or infinite")
		}
		if amax == 0 {
			scales[b] = 0
			clear(q)
			continue
		}
		e := mxfp8Exponent(amax)
		mxfp8Block(q, x, e)
		if weights != nil && e > 1 {
			w := weights[b*MXFP8Block : (b+1)*MXFP8Block]
			var alt [MXFP8Block]byte
			mxfp8Block(alt[:], x, e-1)
			if mxfp8Err(x, w, alt[:], e-1) < mxfp8Err(x, w, q, e) {
				e = e - 1
				copy(q, alt[:])
			}
		}
		scales[b] = e
	}
	return nil
}

// mxfp8Block encodes one block with scale code e; a zero scale (a block of
// magnitudes below 2^-118) saturates nonzero values as the reference's
// division by zero does, and keeps zeros zero.
func mxfp8Block(q []byte, x []float32, e byte) {
	s := E8M0Value(e)
	for j, v := range x {
		if s == 0 {
			switch {
			case v > 0:
				q[j] = 0x7e
			case v < 0:
				q[j] = 0xfe
			default:
				q[j] = 0
			}
			continue
		}
		q[j] = quant.F32ToF8E4M3(min(max(v/s, -FP8E4M3Max), FP8E4M3Max))
	}
}

// mxfp8Err is the weighted squared error of one encoded block.
func mxfp8Err(x, w []float32, q []byte, e byte) float64 {
	s := E8M0Value(e)
	var sum float64
	for j, v := range x {
		d := float64(v - quant.F8E4M3ToF32(q[j])*s)
		sum += float64(w[j]) * d * d
	}
	return sum
}

// DecodeMXFP8Row decodes one row: value = fp8(code)·2^(e-127), in float32.
func DecodeMXFP8Row(dst []float32, codes, scales []byte) error {
	n := len(dst)
	if n%MXFP8Block != 0 || len(codes) != n || len(scales) != n/MXFP8Block {
		return fmt.Errorf("convrot: mxfp8 row of %d values needs %d codes and %d scales", n, n, n/MXFP8Block)
	}
	for i, c := range codes {
		dst[i] = quant.F8E4M3ToF32(c) * E8M0Value(scales[i/MXFP8Block])
	}
	return nil
}

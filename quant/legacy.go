package quant

import (
	"encoding/binary"
	"math"

	"github.com/sdtool/sdtool/formats"
)

// ggml's legacy block types: 32 elements per block with one f16 scale (and
// an f16 minimum for the _1 types). Without importance weights they follow
// quantize_row_*_ref; with weights, q4_0/q5_0 use ggml's make_qx_quants
// search and q4_1/q5_1 make_qkx3_quants (the k-quants' implementations of
// both, makeQxQuants and makeQkxQuants), each element weighted by
// w[j]·sqrt(σ² + x[j]²) where σ² is the row's mean square. q8_0 ignores
// the weights, as ggml does.
//
// NaN and Inf inputs never crash; the output is whatever ggml's arithmetic
// gives on x86-64 (for example a NaN element is ignored when the block
// maximum is searched and encodes as level 0 of q4_0, and a block holding
// an Inf gets an Inf scale), checked against the linked ggml.

func init() {
	Register(Codec{Type: formats.Q4_0, Quantize: quantizeQ4_0, Dequantize: dequantizeQ4_0, UsesWeights: true})
	Register(Codec{Type: formats.Q4_1, Quantize: quantizeQ4_1, Dequantize: dequantizeQ4_1, UsesWeights: true})
	Register(Codec{Type: formats.Q5_0, Quantize: quantizeQ5_0, Dequantize: dequantizeQ5_0, UsesWeights: true})
	Register(Codec{Type: formats.Q5_1, Quantize: quantizeQ5_1, Dequantize: dequantizeQ5_1, UsesWeights: true})
	Register(Codec{Type: formats.Q8_0, Quantize: quantizeQ8_0, Dequantize: dequantizeQ8_0})
	Register(Codec{Type: formats.Q8_1, Dequantize: dequantizeQ8_1})
	Register(Codec{Type: formats.Q8_K, Dequantize: dequantizeQ8_K})
}

const (
	q4_0Bytes = 18
	q4_1Bytes = 20
	q5_0Bytes = 22
	q5_1Bytes = 24
	q8_0Bytes = 34
	q8_1Bytes = 36
	q8_KBytes = 292
)

// blockWeights returns the importance weights of block b of 32, scaled by
// sqrt(sigma2 + x²) as ggml's legacy _impl functions do.
func blockWeights(w *[32]float32, qw, x *[32]float32, sigma2 float32) {
	for j := range w {
		w[j] = qw[j] * cSqrtf(sigma2+float32(x[j]*x[j]))
	}
}

func quantizeQ4_0(dst []byte, src, weights []float32) {
	nb := len(src) / 32
	dst = dst[:nb*q4_0Bytes]
	if weights == nil {
		for i := 0; i < nb; i++ {
			if simd.legacy {
				if i += rowsQ4_0(dst[i*q4_0Bytes:], src[i*32:], nb-i); i == nb {
					break
				}
			}
			quantizeBlockQ4_0((*[q4_0Bytes]byte)(dst[i*q4_0Bytes:]), (*[32]float32)(src[i*32:]))
		}
		return
	}
	sigma2 := rowSigma2(src)
	var w [32]float32
	var L [32]int8
	for i := range nb {
		y, x := (*[q4_0Bytes]byte)(dst[i*q4_0Bytes:]), (*[32]float32)(src[i*32:])
		blockWeights(&w, (*[32]float32)(weights[i*32:]), x, sigma2)
		putHalf(y[0:], makeQxQuants(8, x[:], L[:], w[:]))
		for j := range 16 {
			y[2+j] = uint8(L[j]) | uint8(L[j+16])<<4
		}
	}
}

// quantizeBlockQ4_0 is quantize_row_q4_0_ref for one block: the scale maps
// the element of largest magnitude to -8.
func quantizeBlockQ4_0(y *[q4_0Bytes]byte, x *[32]float32) {
	amaxBits, imax := absMaxFirst(x)
	if amaxBits >= 0x7f800000 {
		// An Inf or NaN: take the general path, which follows ggml's
		// comparisons exactly.
		quantizeBlockQ4_0Slow(y, x)
		return
	}
	d := x[imax] / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y[0:], d)
	if math.Float32bits(id)&0x7fffffff >= 0x7f800000 {
		quantizeBlockQ4_0Slow(y, x) // a subnormal scale whose inverse overflows
		return
	}
	// Every x·id + 8.5 now lies in [0, 17): the conversion cannot overflow.
	for j := range 16 {
		xi0 := min(15, int32(float32(x[j]*id)+8.5))
		xi1 := min(15, int32(float32(x[j+16]*id)+8.5))
		y[2+j] = uint8(xi0) | uint8(xi1)<<4
	}
}

// absMaxBits returns the largest of the bit patterns of |x[i]|. For
// non-NaN values they order like the magnitudes, and an integer max
// compiles to conditional moves where a float comparison would branch; a
// result of 0x7f800000 or more means the block holds an Inf or a NaN.
func absMaxBits(x *[32]float32) uint32 {
	// Four independent chains, so that the conditional moves overlap.
	var m0, m1, m2, m3 uint32
	for j := 0; j < 32; j += 4 {
		m0 = max(m0, math.Float32bits(x[j])&^(1<<31))
		m1 = max(m1, math.Float32bits(x[j+1])&^(1<<31))
		m2 = max(m2, math.Float32bits(x[j+2])&^(1<<31))
		m3 = max(m3, math.Float32bits(x[j+3])&^(1<<31))
	}
	return max(m0, m1, m2, m3)
}

// absMaxFirst returns what absMaxBits does and the index of the first
// element with that magnitude, the one ggml's strict "amax < |v|" scan
// keeps. It takes the maximum of 64-bit keys |x[j]| bits << 5 | (31 - j),
// so that equal magnitudes prefer the lower index, without a branch.
func absMaxFirst(x *[32]float32) (uint32, int) {
	var k0, k1, k2, k3 uint64
	for j := 0; j < 32; j += 4 {
		k0 = max(k0, uint64(math.Float32bits(x[j])&^(1<<31))<<5|uint64(31-j))
		k1 = max(k1, uint64(math.Float32bits(x[j+1])&^(1<<31))<<5|uint64(30-j))
		k2 = max(k2, uint64(math.Float32bits(x[j+2])&^(1<<31))<<5|uint64(29-j))
		k3 = max(k3, uint64(math.Float32bits(x[j+3])&^(1<<31))<<5|uint64(28-j))
	}
	k := max(k0, k1, k2, k3)
	return uint32(k >> 5), 31 - int(k&31)
}

// quantizeBlockQ4_0Slow is quantizeBlockQ4_0 with every C semantic spelled
// out, for blocks holding NaN or Inf.
func quantizeBlockQ4_0Slow(y *[q4_0Bytes]byte, x *[32]float32) {
	var amax, xmax float32
	for _, v := range x {
		if a := cFabs(v); amax < a {
			amax, xmax = a, v
		}
	}
	d := xmax / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y[0:], d)
	for j := range 16 {
		// (int8_t)(x*id + 8.5f), unfused, capped at 15.
		xi0 := min(15, int8(cCvtt(float32(x[j]*id)+8.5)))
		xi1 := min(15, int8(cCvtt(float32(x[j+16]*id)+8.5)))
		y[2+j] = uint8(xi0) | uint8(xi1)<<4
	}
}

func dequantizeQ4_0(dst []float32, src []byte) {
	nb := len(dst) / 32
	src = src[:nb*q4_0Bytes]
	for i := range nb {
		x, y := (*[q4_0Bytes]byte)(src[i*q4_0Bytes:]), (*[32]float32)(dst[i*32:])
		d := half(x[0:])
		for j := range 16 {
			q := x[2+j]
			y[j] = float32(int32(q&15)-8) * d
			y[j+16] = float32(int32(q>>4)-8) * d
		}
	}
}

func quantizeQ4_1(dst []byte, src, weights []float32) {
	nb := len(src) / 32
	dst = dst[:nb*q4_1Bytes]
	if weights == nil {
		for i := 0; i < nb; i++ {
			if simd.legacy {
				if i += rowsQ4_1(dst[i*q4_1Bytes:], src[i*32:], nb-i); i == nb {
					break
				}
			}
			quantizeBlockQ4_1((*[q4_1Bytes]byte)(dst[i*q4_1Bytes:]), (*[32]float32)(src[i*32:]))
		}
		return
	}
	sigma2 := rowSigma2(src)
	var w [32]float32
	var L [32]uint8
	for i := range nb {
		y, x := (*[q4_1Bytes]byte)(dst[i*q4_1Bytes:]), (*[32]float32)(src[i*32:])
		blockWeights(&w, (*[32]float32)(weights[i*32:]), x, sigma2)
		d, m := makeQkxQuants(15, x[:], w[:], L[:], -0.9, 0.05, 36, false)
		putHalf(y[0:], d)
		putHalf(y[2:], -m)
		for j := range 16 {
			y[4+j] = L[j] | L[j+16]<<4
		}
	}
}

// blockMinMax returns the smallest and largest element as ggml's _1 types
// find them (starting from ±FLT_MAX, so NaNs are skipped).
func blockMinMax(x *[32]float32) (mn, mx float32) {
	mn, mx = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < mn {
			mn = v
		}
		if v > mx {
			mx = v
		}
	}
	return mn, mx
}

// quantizeBlockQ4_1 is quantize_row_q4_1_ref for one block: levels 0..15
// spread from the block minimum to its maximum.
func quantizeBlockQ4_1(y *[q4_1Bytes]byte, x *[32]float32) {
	mn, mx, ok := blockMinMaxFast(x)
	if !ok {
		quantizeBlockQ4_1Slow(y, x)
		return
	}
	d := (mx - mn) / 15
	var id float32
	if d != 0 {
		id = 1 / d
		if !(d >= 0x1p-126 && d <= math.MaxFloat32) {
			quantizeBlockQ4_1Slow(y, x) // a subnormal or infinite step
			return
		}
	}
	putHalf(y[0:], d)
	putHalf(y[2:], mn)
	// (x-min)·id + 0.5 lies in [0, 16): no overflow in the conversion.
	for j := range 16 {
		xi0 := min(15, int32(float32((x[j]-mn)*id)+0.5))
		xi1 := min(15, int32(float32((x[j+16]-mn)*id)+0.5))
		y[4+j] = uint8(xi0) | uint8(xi1)<<4
	}
}

// quantizeBlockQ4_1Slow is quantize_row_q4_1_ref with every C semantic
// spelled out, for blocks the fast path does not take.
func quantizeBlockQ4_1Slow(y *[q4_1Bytes]byte, x *[32]float32) {
	mn, mx := blockMinMax(x)
	d := (mx - mn) / 15
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y[0:], d)
	putHalf(y[2:], mn)
	for j := range 16 {
		xi0 := min(15, int8(cCvtt(float32((x[j]-mn)*id)+0.5)))
		xi1 := min(15, int8(cCvtt(float32((x[j+16]-mn)*id)+0.5)))
		y[4+j] = uint8(xi0) | uint8(xi1)<<4
	}
}

// orderKey maps float bits to an int32 that orders like the float value
// (with -0 below +0), so that min and max become integer conditional moves.
func orderKey(b uint32) int32 { return int32(b) ^ int32(uint32(int32(b)>>31)>>1) }

// keyBits inverts orderKey.
func keyBits(k int32) uint32 { return uint32(k ^ int32(uint32(k>>31)>>1)) }

// blockMinMaxFast returns the block's minimum and maximum without branches.
// ok is false when the block holds Inf or NaN, or when an extreme is a zero
// (where ±0 compare equal in C but differ in bits, and the first one met
// wins): blockMinMax must then decide.
func blockMinMaxFast(x *[32]float32) (mn, mx float32, ok bool) {
	lo0, lo1 := int32(math.MaxInt32), int32(math.MaxInt32)
	hi0, hi1 := int32(math.MinInt32), int32(math.MinInt32)
	var abits uint32
	for j := 0; j < 32; j += 2 {
		b0, b1 := math.Float32bits(x[j]), math.Float32bits(x[j+1])
		k0, k1 := orderKey(b0), orderKey(b1)
		lo0, lo1 = min(lo0, k0), min(lo1, k1)
		hi0, hi1 = max(hi0, k0), max(hi1, k1)
		abits = max(abits, b0&^(1<<31), b1&^(1<<31))
	}
	lo, hi := keyBits(min(lo0, lo1)), keyBits(max(hi0, hi1))
	if abits >= 0x7f800000 || lo&^(1<<31) == 0 || hi&^(1<<31) == 0 {
		return 0, 0, false
	}
	return math.Float32frombits(lo), math.Float32frombits(hi), true
}

func dequantizeQ4_1(dst []float32, src []byte) {
	nb := len(dst) / 32
	src = src[:nb*q4_1Bytes]
	for i := range nb {
		x, y := (*[q4_1Bytes]byte)(src[i*q4_1Bytes:]), (*[32]float32)(dst[i*32:])
		d, m := half(x[0:]), half(x[2:])
		for j := range 16 {
			q := x[4+j]
			y[j] = float32(float32(q&15)*d) + m
			y[j+16] = float32(float32(q>>4)*d) + m
		}
	}
}

func quantizeQ5_0(dst []byte, src, weights []float32) {
	nb := len(src) / 32
	dst = dst[:nb*q5_0Bytes]
	if weights == nil {
		for i := 0; i < nb; i++ {
			if simd.legacy {
				if i += rowsQ5_0(dst[i*q5_0Bytes:], src[i*32:], nb-i); i == nb {
					break
				}
			}
			quantizeBlockQ5_0((*[q5_0Bytes]byte)(dst[i*q5_0Bytes:]), (*[32]float32)(src[i*32:]))
		}
		return
	}
	sigma2 := rowSigma2(src)
	var w [32]float32
	var L [32]int8
	var Lu [32]uint8
	for i := range nb {
		y, x := (*[q5_0Bytes]byte)(dst[i*q5_0Bytes:]), (*[32]float32)(src[i*32:])
		blockWeights(&w, (*[32]float32)(weights[i*32:]), x, sigma2)
		putHalf(y[0:], makeQxQuants(16, x[:], L[:], w[:]))
		for j, l := range L {
			Lu[j] = uint8(l)
		}
		packQ5(y[2:], &Lu)
	}
}

// packQ5 stores 32 five-bit levels as a 32-bit mask of high bits (element j
// in bit j) followed by 16 bytes of low nibbles (j and j+16 share a byte).
func packQ5(y []byte, L *[32]uint8) {
	y = y[:20]
	var qh uint32
	for j := range 16 {
		xi0, xi1 := L[j], L[j+16]
		y[4+j] = xi0&15 | (xi1&15)<<4
		qh |= uint32(xi0&0x10) >> 4 << j
		qh |= uint32(xi1&0x10) >> 4 << (j + 16)
	}
	binary.LittleEndian.PutUint32(y, qh)
}

// quantizeBlockQ5_0 is quantize_row_q5_0_ref for one block: the element of
// largest magnitude maps to -16.
func quantizeBlockQ5_0(y *[q5_0Bytes]byte, x *[32]float32) {
	amaxBits, imax := absMaxFirst(x)
	if amaxBits >= 0x7f800000 {
		quantizeBlockQ5_0Slow(y, x)
		return
	}
	d := x[imax] / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	if math.Float32bits(id)&0x7fffffff >= 0x7f800000 {
		quantizeBlockQ5_0Slow(y, x)
		return
	}
	putHalf(y[0:], d)
	var L [32]uint8
	for j, v := range x {
		L[j] = uint8(min(31, int32(float32(v*id)+16.5)))
	}
	packQ5(y[2:], &L)
}

// quantizeBlockQ5_0Slow is quantize_row_q5_0_ref with C semantics spelled
// out, for blocks holding NaN or Inf.
func quantizeBlockQ5_0Slow(y *[q5_0Bytes]byte, x *[32]float32) {
	var amax, xmax float32
	for _, v := range x {
		if a := cFabs(v); amax < a {
			amax, xmax = a, v
		}
	}
	d := xmax / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y[0:], d)
	var L [32]uint8
	for j, v := range x {
		L[j] = uint8(min(31, int8(cCvtt(float32(v*id)+16.5))))
	}
	packQ5(y[2:], &L)
}

func dequantizeQ5_0(dst []float32, src []byte) {
	nb := len(dst) / 32
	src = src[:nb*q5_0Bytes]
	for i := range nb {
		x, y := (*[q5_0Bytes]byte)(src[i*q5_0Bytes:]), (*[32]float32)(dst[i*32:])
		d := half(x[0:])
		qh := binary.LittleEndian.Uint32(x[2:])
		for j := range 16 {
			q := x[6+j]
			h0 := byte(qh>>j<<4) & 0x10
			h1 := byte(qh>>(j+12)) & 0x10
			y[j] = float32(int32(q&15|h0)-16) * d
			y[j+16] = float32(int32(q>>4|h1)-16) * d
		}
	}
}

func quantizeQ5_1(dst []byte, src, weights []float32) {
	nb := len(src) / 32
	dst = dst[:nb*q5_1Bytes]
	if weights == nil {
		for i := 0; i < nb; i++ {
			if simd.legacy {
				if i += rowsQ5_1(dst[i*q5_1Bytes:], src[i*32:], nb-i); i == nb {
					break
				}
			}
			quantizeBlockQ5_1((*[q5_1Bytes]byte)(dst[i*q5_1Bytes:]), (*[32]float32)(src[i*32:]))
		}
		return
	}
	sigma2 := rowSigma2(src)
	var w [32]float32
	var L [32]uint8
	for i := range nb {
		y, x := (*[q5_1Bytes]byte)(dst[i*q5_1Bytes:]), (*[32]float32)(src[i*32:])
		blockWeights(&w, (*[32]float32)(weights[i*32:]), x, sigma2)
		d, m := makeQkxQuants(31, x[:], w[:], L[:], -0.9, 0.05, 36, false)
		putHalf(y[0:], d)
		putHalf(y[2:], -m)
		packQ5(y[4:], &L)
	}
}

// quantizeBlockQ5_1 is quantize_row_q5_1_ref for one block.
func quantizeBlockQ5_1(y *[q5_1Bytes]byte, x *[32]float32) {
	mn, mx, ok := blockMinMaxFast(x)
	if !ok {
		quantizeBlockQ5_1Slow(y, x)
		return
	}
	d := (mx - mn) / 31
	var id float32
	if d != 0 {
		id = 1 / d
		if !(d >= 0x1p-126 && d <= math.MaxFloat32) {
			quantizeBlockQ5_1Slow(y, x)
			return
		}
	}
	putHalf(y[0:], d)
	putHalf(y[2:], mn)
	var L [32]uint8
	for j, v := range x {
		L[j] = uint8(int32(float32((v-mn)*id) + 0.5))
	}
	packQ5(y[4:], &L)
}

// quantizeBlockQ5_1Slow is quantize_row_q5_1_ref with C semantics spelled
// out.
func quantizeBlockQ5_1Slow(y *[q5_1Bytes]byte, x *[32]float32) {
	mn, mx := blockMinMax(x)
	d := (mx - mn) / 31
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y[0:], d)
	putHalf(y[2:], mn)
	var L [32]uint8
	for j, v := range x {
		// (uint8_t)(x + 0.5f): no cap, as in ggml.
		L[j] = uint8(cCvtt(float32((v-mn)*id) + 0.5))
	}
	packQ5(y[4:], &L)
}

func dequantizeQ5_1(dst []float32, src []byte) {
	nb := len(dst) / 32
	src = src[:nb*q5_1Bytes]
	for i := range nb {
		x, y := (*[q5_1Bytes]byte)(src[i*q5_1Bytes:]), (*[32]float32)(dst[i*32:])
		d, m := half(x[0:]), half(x[2:])
		qh := binary.LittleEndian.Uint32(x[4:])
		for j := range 16 {
			q := x[8+j]
			h0 := byte(qh>>j<<4) & 0x10
			h1 := byte(qh>>(j+12)) & 0x10
			y[j] = float32(float32(q&15|h0)*d) + m
			y[j+16] = float32(float32(q>>4|h1)*d) + m
		}
	}
}

// quantizeQ8_0 is quantize_row_q8_0_ref; ggml ignores importance weights
// for q8_0.
func quantizeQ8_0(dst []byte, src, _ []float32) {
	nb := len(src) / 32
	dst = dst[:nb*q8_0Bytes]
	for i := 0; i < nb; i++ {
		if simd.legacy {
			if i += rowsQ8_0(dst[i*q8_0Bytes:], src[i*32:], nb-i); i == nb {
				break
			}
		}
		quantizeBlockQ8_0((*[q8_0Bytes]byte)(dst[i*q8_0Bytes:]), (*[32]float32)(src[i*32:]))
	}
}

// roundHalf is the largest float32 below 0.5: adding it with x's sign and
// truncating rounds halves away from zero exactly, as roundf does, for
// every |x| < 2^24 (checked exhaustively).
const roundHalf = 0x3effffff

func quantizeBlockQ8_0(y *[q8_0Bytes]byte, x *[32]float32) {
	amaxBits := absMaxBits(x)
	if amaxBits >= 0x7f800000 {
		quantizeBlockQ8_0Slow(y, x)
		return
	}
	d := math.Float32frombits(amaxBits) / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	if math.Float32bits(id)&0x7fffffff >= 0x7f800000 {
		quantizeBlockQ8_0Slow(y, x)
		return
	}
	putHalf(y[0:], d)
	q := (*[32]byte)(y[2:])
	for j, v := range x {
		// |p| <= 127 (plus rounding), so the conversion cannot overflow.
		p := float32(v * id)
		h := math.Float32frombits(roundHalf | math.Float32bits(p)&(1<<31))
		q[j] = byte(int32(p + h))
	}
}

// quantizeBlockQ8_0Slow follows ggml's C semantics step by step, for blocks
// holding NaN or Inf.
func quantizeBlockQ8_0Slow(y *[q8_0Bytes]byte, x *[32]float32) {
	var amax float32
	for _, v := range x {
		// MAX(amax, fabsf(v)): a NaN replaces amax, and the next
		// element replaces the NaN.
		if a := cFabs(v); !(amax > a) {
			amax = a
		}
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y[0:], d)
	q := y[2:]
	for j, v := range x {
		q[j] = byte(cRoundf(v * id))
	}
}

func dequantizeQ8_0(dst []float32, src []byte) {
	nb := len(dst) / 32
	src = src[:nb*q8_0Bytes]
	for i := range nb {
		x, y := (*[q8_0Bytes]byte)(src[i*q8_0Bytes:]), (*[32]float32)(dst[i*32:])
		d := half(x[0:])
		q := (*[32]byte)(x[2:])
		for j := range y {
			y[j] = float32(int8(q[j])) * d
		}
	}
}

// dequantizeQ8_1 decodes q8_1 (f16 d, f16 sum, 32 int8) as d·q; the stored
// sum is only an aid to dot products. ggml has no q8_1 dequantizer; this is
// q8_0's formula on the same fields.
func dequantizeQ8_1(dst []float32, src []byte) {
	nb := len(dst) / 32
	src = src[:nb*q8_1Bytes]
	for i := range nb {
		x, y := (*[q8_1Bytes]byte)(src[i*q8_1Bytes:]), (*[32]float32)(dst[i*32:])
		d := half(x[0:])
		q := (*[32]byte)(x[4:])
		for j := range y {
			y[j] = float32(int8(q[j])) * d
		}
	}
}

// dequantizeQ8_K decodes q8_K (f32 d, 256 int8, 16 int16 group sums that
// only serve dot products) as d·q, as ggml's dequantize_row_q8_K does.
func dequantizeQ8_K(dst []float32, src []byte) {
	nb := len(dst) / 256
	src = src[:nb*q8_KBytes]
	for i := range nb {
		x, y := (*[q8_KBytes]byte)(src[i*q8_KBytes:]), (*[256]float32)(dst[i*256:])
		d := math.Float32frombits(binary.LittleEndian.Uint32(x[0:]))
		q := (*[256]byte)(x[4:])
		for j := range y {
			y[j] = d * float32(int8(q[j]))
		}
	}
}

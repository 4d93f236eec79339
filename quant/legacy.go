package quant

import (
	"encoding/binary"
	"math"

	"github.com/sdtool/sdtool/formats"
)

// ggml's legacy block types: 32 elements per block with one f16 scale (and
// an f16 minimum for the _1 types). Without importance weights they follow
// quantize_row_*_ref; with weights, q4_0/q5_0 use ggml's make_qx_quants
// search and q4_1/q5_1 make_qkx3_quants, each element weighted by
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
		for i := range nb {
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
		putHalf(y[0:], qxWeightedScale(8, x, &L, &w))
		for j := range 16 {
			y[2+j] = uint8(L[j]) | uint8(L[j+16])<<4
		}
	}
}

// quantizeBlockQ4_0 is quantize_row_q4_0_ref for one block: the scale maps
// the element of largest magnitude to -8.
func quantizeBlockQ4_0(y *[q4_0Bytes]byte, x *[32]float32) {
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
		for i := range nb {
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
		d, m := qkx3WeightedScale(15, x, &w, &L)
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
		for i := range nb {
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
		putHalf(y[0:], qxWeightedScale(16, x, &L, &w))
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
		for i := range nb {
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
		d, m := qkx3WeightedScale(31, x, &w, &L)
		putHalf(y[0:], d)
		putHalf(y[2:], -m)
		packQ5(y[4:], &L)
	}
}

// quantizeBlockQ5_1 is quantize_row_q5_1_ref for one block.
func quantizeBlockQ5_1(y *[q5_1Bytes]byte, x *[32]float32) {
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
	for i := range nb {
		y, x := (*[q8_0Bytes]byte)(dst[i*q8_0Bytes:]), (*[32]float32)(src[i*32:])
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

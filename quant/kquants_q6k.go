package quant

import "github.com/sdtool/sdtool/formats"

// q6_K: sixteen sub-blocks of 16 with a signed 8-bit scale each. Block:
// ql[128] (low nibbles; byte l of each 64 holds elements l and l+64 of its
// 128, byte l+32 holds l+32 and l+96), qh[64] (the top two bits of elements
// l, l+32, l+64, l+96 of each 128 in byte l), scales[16], then the f16 d.
const q6KBytes = 210

func quantizeQ6K(dst []byte, src, weights []float32) {
	nb := blocks256(formats.Q6_K, dst, src, weights)
	for i := range nb {
		x := (*[qkBlock]float32)(src[i*qkBlock:])
		y := (*[q6KBytes]byte)(dst[i*q6KBytes:])
		var qw *[qkBlock]float32
		if weights != nil {
			qw = (*[qkBlock]float32)(weights[i*qkBlock:])
		}
		quantizeBlockQ6K(y, x, qw)
	}
}

// quantizeBlockQ6K is quantize_row_q6_K_ref (qw nil) and _impl for one
// super-block: make_qx_quants per sub-block with weights x^2 or qw itself
// (ggml's weighted q6_K uses the importance as is, without sigma2), then
// 8-bit scale codes relative to the largest scale.
func quantizeBlockQ6K(y *[q6KBytes]byte, x, qw *[qkBlock]float32) {
	var L [qkBlock]int8
	var scales [16]float32
	var maxScale, maxAbs float32
	for ib := range 16 {
		var w []float32
		if qw != nil {
			w = qw[16*ib : 16*ib+16]
		}
		s := makeQxQuants(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16], w)
		scales[ib] = s
		if a := cFabs(s); a > maxAbs {
			maxAbs, maxScale = a, s
		}
	}
	if maxAbs < groupMaxEps {
		*y = [q6KBytes]byte{}
		return
	}
	iscale := -128 / maxScale
	d := putF16(y[208:210], 1/iscale)
	sc := (*[16]byte)(y[192:208])
	for ib := range sc {
		sc[ib] = uint8(int8(min(127, cNearestInt(float32(iscale*scales[ib])))))
	}
	for j, s := range sc {
		dl := d * float32(int8(s))
		if dl == 0 {
			continue
		}
		xb := (*[16]float32)(x[16*j:])
		lb := (*[16]int8)(L[16*j:])
		for ii, v := range xb {
			lb[ii] = int8(clampInt32(cNearestInt(v/dl), -32, 31) + 32)
		}
	}
	for j := 0; j < qkBlock; j += 128 {
		a := (*[32]int8)(L[j:])
		b := (*[32]int8)(L[j+32:])
		c := (*[32]int8)(L[j+64:])
		e := (*[32]int8)(L[j+96:])
		ql := (*[64]byte)(y[j/2:])
		qh := (*[32]byte)(y[128+j/4:])
		for l := range 32 {
			q1, q2, q3, q4 := uint8(a[l]), uint8(b[l]), uint8(c[l]), uint8(e[l])
			ql[l] = q1&0xf | q3<<4
			ql[l+32] = q2&0xf | q4<<4
			qh[l] = q1>>4 | q2>>4<<2 | q3>>4<<4 | q4>>4<<6
		}
	}
}

func dequantizeQ6K(dst []float32, src []byte) {
	nb := len(dst) / qkBlock
	for i := range nb {
		b := (*[q6KBytes]byte)(src[i*q6KBytes:])
		y := (*[qkBlock]float32)(dst[i*qkBlock:])
		d := half(b[208:])
		for n := 0; n < 2; n++ {
			ql := (*[64]byte)(b[64*n:])
			qh := (*[32]byte)(b[128+32*n:])
			sc := (*[8]byte)(b[192+8*n:])
			o := (*[128]float32)(y[128*n:])
			for l := range 32 {
				is := l / 16
				h := qh[l]
				q1 := int32(ql[l]&0xf|(h&3)<<4) - 32
				q2 := int32(ql[l+32]&0xf|(h>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(h>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(h>>6&3)<<4) - 32
				o[l] = d * float32(int8(sc[is])) * float32(q1)
				o[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
				o[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
				o[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
			}
		}
	}
}

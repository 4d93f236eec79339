package quant

import "github.com/sdtool/sdtool/formats"

// q2_K: sixteen sub-blocks of 16 with a 4-bit scale and a 4-bit offset each
// (scales[16], scale in the low nibble), 2-bit levels in qs[64] (byte l of
// each 32 holds elements l, l+32, l+64, l+96 of its 128), then the f16
// super-block factors d and dmin.
const q2KBytes = 84

// pack2bit stores the 2-bit levels of a super-block in ggml's q2_K/q3_K
// order.
func pack2bit(qs *[64]byte, L *[qkBlock]uint8) {
	for j := 0; j < qkBlock; j += 128 {
		a := (*[32]uint8)(L[j:])
		b := (*[32]uint8)(L[j+32:])
		c := (*[32]uint8)(L[j+64:])
		e := (*[32]uint8)(L[j+96:])
		o := (*[32]byte)(qs[j/4:])
		for l := range o {
			o[l] = a[l] | b[l]<<2 | c[l]<<4 | e[l]<<6
		}
	}
}

func quantizeQ2K(dst []byte, src, weights []float32) {
	nb := blocks256(formats.Q2_K, dst, src, weights)
	for i := range nb {
		x := (*[qkBlock]float32)(src[i*qkBlock:])
		y := (*[q2KBytes]byte)(dst[i*q2KBytes:])
		if weights == nil {
			quantizeBlockQ2KRef(y, x)
		} else {
			quantizeBlockQ2KImpl(y, x, (*[qkBlock]float32)(weights[i*qkBlock:]))
		}
	}
}

// quantizeBlockQ2KRef is quantize_row_q2_K_ref for one super-block: levels
// 0..3 by make_qkx2_quants under weights |x| with absolute error, then the
// scales and offsets as 4-bit codes of their maxima.
func quantizeBlockQ2KRef(y *[q2KBytes]byte, x *[qkBlock]float32) {
	var L [qkBlock]uint8
	var weights [16]float32
	var scales, mins [16]float32
	var maxScale, maxMin float32
	for j := range 16 {
		xb := (*[16]float32)(x[16*j:])
		for l, v := range xb {
			weights[l] = cFabs(v)
		}
		scales[j], mins[j] = makeQkxQuants(3, xb[:], weights[:], L[16*j:16*j+16], -0.5, 0.1, 15, true)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	sc := (*[16]byte)(y[0:16])
	var d, dmin float32
	if maxScale > 0 {
		iscale := 15 / maxScale
		for j := range sc {
			sc[j] = uint8(cNearestInt(float32(iscale * scales[j])))
		}
		d = putF16(y[80:82], maxScale/15)
	} else {
		*sc = [16]byte{}
		d = putF16(y[80:82], 0)
	}
	if maxMin > 0 {
		iscale := 15 / maxMin
		for j := range sc {
			sc[j] |= uint8(cNearestInt(float32(iscale*mins[j])) << 4)
		}
		dmin = putF16(y[82:84], maxMin/15)
	} else {
		dmin = putF16(y[82:84], 0)
	}
	requantQ2K(&L, x, sc, d, dmin)
	pack2bit((*[64]byte)(y[16:80]), &L)
}

// quantizeBlockQ2KImpl is quantize_row_q2_K_impl for one super-block:
// weights qw*sqrt(sigma2+x^2) with sigma2 = mean(x^2), make_qkx3_quants per
// sub-block, make_qp_quants for the 4-bit codes.
func quantizeBlockQ2KImpl(y *[q2KBytes]byte, x, qw *[qkBlock]float32) {
	var L [qkBlock]uint8
	var weight [16]float32
	var sw, scales, mins [16]float32
	var sumX2 float32
	for _, v := range x {
		sumX2 += float32(v * v)
	}
	sigma2 := float32(sumX2 / qkBlock) // rounded: the compiler may turn /256 into a fusable *2^-8
	for j := range 16 {
		xb := (*[16]float32)(x[16*j:])
		wb := (*[16]float32)(qw[16*j:])
		for l, v := range xb {
			weight[l] = float32(wb[l] * cSqrtf(sigma2+float32(v*v)))
		}
		var s float32
		for _, w := range weight {
			s += w
		}
		sw[j] = s
		scales[j], mins[j] = makeQkxQuants(3, xb[:], weight[:], L[16*j:16*j+16], -0.9, 0.05, 36, false)
	}
	var ls, lm [16]uint8
	dm := makeQpQuants(15, scales[:], ls[:], sw[:])
	mm := makeQpQuants(15, mins[:], lm[:], sw[:])
	dm = putF16(y[80:82], dm)
	mm = putF16(y[82:84], mm)
	sc := (*[16]byte)(y[0:16])
	for j := range sc {
		sc[j] = ls[j] | lm[j]<<4
	}
	requantQ2K(&L, x, sc, dm, mm)
	pack2bit((*[64]byte)(y[16:80]), &L)
}

// requantQ2K recomputes the levels 0..3 from the stored scales and offsets;
// sub-blocks with a zero scale keep the levels of their search.
func requantQ2K(L *[qkBlock]uint8, x *[qkBlock]float32, sc *[16]byte, d, dmin float32) {
	for j, s := range sc {
		dl := d * float32(s&0xf)
		if dl == 0 {
			continue
		}
		m := float32(dmin * float32(s>>4))
		xb := (*[16]float32)(x[16*j:])
		lb := (*[16]uint8)(L[16*j:])
		for i, v := range xb {
			lb[i] = uint8(clampInt32(cNearestInt((v+m)/dl), 0, 3))
		}
	}
}

func dequantizeQ2K(dst []float32, src []byte) {
	nb := len(dst) / qkBlock
	for i := range nb {
		b := (*[q2KBytes]byte)(src[i*q2KBytes:])
		y := (*[qkBlock]float32)(dst[i*qkBlock:])
		d, dmin := half(b[80:]), half(b[82:])
		sc := (*[16]byte)(b[0:16])
		// Sub-block s covers elements 16*s..16*s+15; its levels sit in byte
		// 32*(s/8) + 16*(s%2) + l at bit 2*((s/2)%4).
		for s := range 16 {
			dl, ml := d*float32(sc[s]&0xf), float32(dmin*float32(sc[s]>>4))
			q := (*[16]byte)(b[16+32*(s/8)+16*(s%2):])
			shift := uint(2 * ((s / 2) % 4))
			o := (*[16]float32)(y[16*s:])
			for l, v := range q {
				o[l] = float32(dl*float32((v>>shift)&3)) - ml
			}
		}
	}
}

package quant

import "github.com/sdtool/sdtool/formats"

// q4_K and q5_K: eight sub-blocks of 32 with a 6-bit scale and a 6-bit
// offset each, packed in 12 bytes, under two f16 super-block factors.
// q4_K block: d, dmin (f16), scales[12], qs[128] (low nibbles are the first
// 32 of each 64, high nibbles the next 32). q5_K adds qh[32] (one high bit
// per element) between scales and qs.
const (
	q4KBytes = 144
	q5KBytes = 176
)

// packScalesK4 stores eight 6-bit scales and offsets as ggml does: the first
// four of each whole, the other four split into a low nibble byte and two
// high bits on top of the first eight bytes.
func packScalesK4(q *[12]byte, ls, lm *[8]uint8) {
	for j := range 4 {
		q[j] = ls[j]
		q[j+4] = lm[j]
	}
	for j := 4; j < 8; j++ {
		q[j+4] = ls[j]&0xf | lm[j]&0xf<<4
		q[j-4] |= ls[j] >> 4 << 6
		q[j] |= lm[j] >> 4 << 6
	}
}

// scaleMinK4 is ggml's get_scale_min_k4: the 6-bit scale and offset of
// sub-block j.
func scaleMinK4(j int, q *[12]byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | q[j-4]>>6<<4, q[j+4]>>4 | q[j]>>6<<4
}

// requantK4 recomputes the levels 0..nmax of every sub-block from the
// scales as stored (f16 factors times 6-bit codes), as ggml does after
// packing. A sub-block whose scale is zero keeps the levels of its search.
func requantK4(L *[qkBlock]uint8, x *[qkBlock]float32, q *[12]byte, d, dmin float32, nmax int32) {
	for j := range 8 {
		sc, m := scaleMinK4(j, q)
		dl := d * float32(sc)
		if dl == 0 {
			continue
		}
		dm := float32(dmin * float32(m))
		xb := (*[32]float32)(x[32*j:])
		lb := (*[32]uint8)(L[32*j:])
		for i, v := range xb {
			lb[i] = uint8(clampInt32(cNearestInt((v+dm)/dl), 0, nmax))
		}
	}
}

// scalesK4Ref turns the sub-block scales and offsets of the reference
// search into 6-bit codes relative to their maxima and returns the two
// super-block factors (max/63), as quantize_row_q4_K_ref and _q5_K_ref do.
func scalesK4Ref(scales, mins *[8]float32, ls, lm *[8]uint8) (d, dmin float32) {
	var maxScale, maxMin float32
	for j := range 8 {
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	for j := range 8 {
		ls[j] = min(63, uint8(cNearestInt(float32(invScale*scales[j]))))
		lm[j] = min(63, uint8(cNearestInt(float32(invMin*mins[j]))))
	}
	return maxScale / 63, maxMin / 63
}

// searchK4Ref runs the reference path's per-sub-block search: weights
// av_x+|x| (av_x the sub-block's RMS) and make_qkx2_quants.
func searchK4Ref(x *[qkBlock]float32, L *[qkBlock]uint8, scales, mins *[8]float32, nmax int32, rmin, rdelta float32, nstep int) {
	var weights [32]float32
	for j := range 8 {
		xb := (*[32]float32)(x[32*j:])
		var sumX2 float32
		for _, v := range xb {
			sumX2 += float32(v * v)
		}
		avX := cSqrtf(sumX2 / 32)
		for l, v := range xb {
			weights[l] = avX + cFabs(v)
		}
		scales[j], mins[j] = makeQkxQuants(nmax, xb[:], weights[:], L[32*j:32*j+32], rmin, rdelta, nstep, false)
	}
}

// searchK4Impl runs the weighted path's per-sub-block search: weights
// qw*sqrt(sigma2+x^2) with sigma2 = 2*mean(x^2) over the super-block,
// make_qkx3_quants, then make_qp_quants for the 6-bit codes.
func searchK4Impl(x, qw *[qkBlock]float32, L *[qkBlock]uint8, ls, lm *[8]uint8, nmax int32) (d, dmin float32) {
	var sumX2 float32
	for _, v := range x {
		sumX2 += float32(v * v)
	}
	sigma2 := float32(2 * sumX2 / qkBlock) // rounded: /256 may become a fusable *2^-8
	var weights [32]float32
	var sw, scales, mins [8]float32
	for j := range 8 {
		xb := (*[32]float32)(x[32*j:])
		wb := (*[32]float32)(qw[32*j:])
		var sumW float32
		for l, v := range xb {
			w := float32(wb[l] * cSqrtf(sigma2+float32(v*v)))
			weights[l] = w
		}
		for _, w := range weights {
			sumW += w
		}
		sw[j] = sumW
		scales[j], mins[j] = makeQkxQuants(nmax, xb[:], weights[:], L[32*j:32*j+32], -0.9, 0.05, 36, false)
	}
	d = makeQpQuants(63, scales[:], ls[:], sw[:])
	dmin = makeQpQuants(63, mins[:], lm[:], sw[:])
	return d, dmin
}

func quantizeQ4K(dst []byte, src, weights []float32) {
	nb := blocks256(formats.Q4_K, dst, src, weights)
	for i := range nb {
		x := (*[qkBlock]float32)(src[i*qkBlock:])
		y := (*[q4KBytes]byte)(dst[i*q4KBytes:])
		var L [qkBlock]uint8
		var ls, lm [8]uint8
		var d, dmin float32
		if weights == nil {
			var scales, mins [8]float32
			searchK4Ref(x, &L, &scales, &mins, 15, -1, 0.1, 20)
			d, dmin = scalesK4Ref(&scales, &mins, &ls, &lm)
		} else {
			d, dmin = searchK4Impl(x, (*[qkBlock]float32)(weights[i*qkBlock:]), &L, &ls, &lm, 15)
		}
		q := (*[12]byte)(y[4:16])
		packScalesK4(q, &ls, &lm)
		d = putF16(y[0:2], d)
		dmin = putF16(y[2:4], dmin)
		requantK4(&L, x, q, d, dmin, 15)
		qs := (*[128]byte)(y[16:])
		for j := 0; j < qkBlock; j += 64 {
			lo := (*[32]uint8)(L[j:])
			hi := (*[32]uint8)(L[j+32:])
			o := (*[32]byte)(qs[j/2:])
			for l := range o {
				o[l] = lo[l] | hi[l]<<4
			}
		}
	}
}

func dequantizeQ4K(dst []float32, src []byte) {
	nb := len(dst) / qkBlock
	for i := range nb {
		b := (*[q4KBytes]byte)(src[i*q4KBytes:])
		y := (*[qkBlock]float32)(dst[i*qkBlock:])
		d, dmin := half(b[0:]), half(b[2:])
		q := (*[12]byte)(b[4:16])
		for j := 0; j < 4; j++ {
			sc, m := scaleMinK4(2*j, q)
			d1, m1 := d*float32(sc), float32(dmin*float32(m))
			sc, m = scaleMinK4(2*j+1, q)
			d2, m2 := d*float32(sc), float32(dmin*float32(m))
			qs := (*[32]byte)(b[16+32*j:])
			lo := (*[32]float32)(y[64*j:])
			hi := (*[32]float32)(y[64*j+32:])
			for l, v := range qs {
				lo[l] = float32(d1*float32(v&0xf)) - m1
				hi[l] = float32(d2*float32(v>>4)) - m2
			}
		}
	}
}

func quantizeQ5K(dst []byte, src, weights []float32) {
	nb := blocks256(formats.Q5_K, dst, src, weights)
	for i := range nb {
		x := (*[qkBlock]float32)(src[i*qkBlock:])
		y := (*[q5KBytes]byte)(dst[i*q5KBytes:])
		var L [qkBlock]uint8
		var ls, lm [8]uint8
		var d, dmin float32
		if weights == nil {
			var scales, mins [8]float32
			searchK4Ref(x, &L, &scales, &mins, 31, -0.5, 0.1, 15)
			d, dmin = scalesK4Ref(&scales, &mins, &ls, &lm)
		} else {
			d, dmin = searchK4Impl(x, (*[qkBlock]float32)(weights[i*qkBlock:]), &L, &ls, &lm, 31)
			// Unlike q4_K, ggml's weighted q5_K clamps the codes to 6 bits.
			for j := range 8 {
				ls[j], lm[j] = min(63, ls[j]), min(63, lm[j])
			}
		}
		q := (*[12]byte)(y[4:16])
		packScalesK4(q, &ls, &lm)
		d = putF16(y[0:2], d)
		dmin = putF16(y[2:4], dmin)
		requantK4(&L, x, q, d, dmin, 31)
		qh := (*[32]byte)(y[16:48])
		qs := (*[128]byte)(y[48:])
		*qh = [32]byte{}
		// Every level is in 0..31: bit 4 goes to qh (bit 2k for the first 32
		// of group k, 2k+1 for the second), the low four to qs.
		for n := 0; n < qkBlock; n += 64 {
			lo := (*[32]uint8)(L[n:])
			hi := (*[32]uint8)(L[n+32:])
			o := (*[32]byte)(qs[n/2:])
			shift := uint(n / 32)
			for j := range o {
				l1, l2 := lo[j], hi[j]
				qh[j] |= (l1>>4)<<shift | (l2>>4)<<(shift+1)
				o[j] = l1&15 | l2<<4
			}
		}
	}
}

func dequantizeQ5K(dst []float32, src []byte) {
	nb := len(dst) / qkBlock
	for i := range nb {
		b := (*[q5KBytes]byte)(src[i*q5KBytes:])
		y := (*[qkBlock]float32)(dst[i*qkBlock:])
		d, dmin := half(b[0:]), half(b[2:])
		q := (*[12]byte)(b[4:16])
		qh := (*[32]byte)(b[16:48])
		u1, u2 := uint8(1), uint8(2)
		for j := 0; j < 4; j++ {
			sc, m := scaleMinK4(2*j, q)
			d1, m1 := d*float32(sc), float32(dmin*float32(m))
			sc, m = scaleMinK4(2*j+1, q)
			d2, m2 := d*float32(sc), float32(dmin*float32(m))
			qs := (*[32]byte)(b[48+32*j:])
			lo := (*[32]float32)(y[64*j:])
			hi := (*[32]float32)(y[64*j+32:])
			for l, v := range qs {
				a, c := int32(v&0xf), int32(v>>4)
				if qh[l]&u1 != 0 {
					a += 16
				}
				if qh[l]&u2 != 0 {
					c += 16
				}
				lo[l] = float32(d1*float32(a)) - m1
				hi[l] = float32(d2*float32(c)) - m2
			}
			u1 <<= 2
			u2 <<= 2
		}
	}
}

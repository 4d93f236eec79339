package quant

import "github.com/sdtool/sdtool/formats"

// q3_K: sixteen sub-blocks of 16 with a signed 6-bit scale each. Block:
// hmask[32] (the third bit of each level: element 32*b+l at bit b of byte
// l), qs[64] (the low two bits, in q2_K's order), scales[12] (low nibbles of
// scales 0..7 and 8..15 share bytes 0..7; bits 4-5 of scale j sit in byte
// 8+j%4 at bit 2*(j/4)), then the f16 factor d.
const q3KBytes = 110

func quantizeQ3K(dst []byte, src, weights []float32) {
	nb := blocks256(formats.Q3_K, dst, src, weights)
	for i := range nb {
		x := (*[qkBlock]float32)(src[i*qkBlock:])
		y := (*[q3KBytes]byte)(dst[i*q3KBytes:])
		var L [qkBlock]int8
		sc := (*[12]byte)(y[96:108])
		*sc = [12]byte{}
		var d float32
		if weights == nil {
			// quantize_row_q3_K_ref: make_q3_quants per sub-block, then the
			// scales as 6-bit codes of the largest one.
			var scales [16]float32
			var maxScale, amax float32
			for j := range 16 {
				scales[j] = makeQ3Quants(4, x[16*j:16*j+16], L[16*j:16*j+16])
				if s := cFabs(scales[j]); s > amax {
					amax, maxScale = s, scales[j]
				}
			}
			if maxScale != 0 {
				iscale := -32 / maxScale
				for j := range 16 {
					l := int8(cNearestInt(float32(iscale * scales[j])))
					putScaleQ3K(sc, j, uint8(max(-32, min(31, l))+32))
				}
				d = putF16(y[108:110], 1/iscale)
			} else {
				d = putF16(y[108:110], 0)
			}
		} else {
			// quantize_row_q3_K_impl: weighted make_qx_quants per sub-block
			// under qw*sqrt(sigma2+x^2), sigma2 = 2*mean(x^2), and once more
			// for the 6-bit scale codes.
			qw := (*[qkBlock]float32)(weights[i*qkBlock:])
			var sumX2 float32
			for _, v := range x {
				sumX2 += float32(v * v)
			}
			sigma2 := float32(2 * sumX2 / qkBlock) // rounded: /256 may become a fusable *2^-8
			var weight [16]float32
			var sw, scales [16]float32
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
				scales[j] = makeQxQuants(4, xb[:], L[16*j:16*j+16], weight[:])
			}
			var ls [16]int8
			dBlock := makeQxQuants(32, scales[:], ls[:], sw[:])
			for j, l := range ls {
				putScaleQ3K(sc, j, uint8(l))
			}
			d = putF16(y[108:110], dBlock)
		}
		for j := range 16 {
			dl := d * float32(scaleQ3K(sc, j))
			if dl == 0 {
				continue
			}
			xb := (*[16]float32)(x[16*j:])
			lb := (*[16]int8)(L[16*j:])
			for ii, v := range xb {
				lb[ii] = int8(clampInt32(cNearestInt(v/dl), -4, 3) + 4)
			}
		}
		// Every level is in 0..7 here, so ggml's "if L > 3, set the hmask
		// bit and subtract 4" is bit 2 and the low two bits, without the
		// unpredictable branch.
		hm := (*[32]byte)(y[0:32])
		*hm = [32]byte{}
		var U [qkBlock]uint8
		for b := range 8 {
			lb := (*[32]int8)(L[32*b:])
			ub := (*[32]uint8)(U[32*b:])
			for j, l := range lb {
				hm[j] |= (uint8(l) >> 2 & 1) << b
				ub[j] = uint8(l) & 3
			}
		}
		pack2bit((*[64]byte)(y[32:96]), &U)
	}
}

// putScaleQ3K ORs the 6-bit code l of sub-block j into the packed scales,
// which start zeroed; ggml's int8 arithmetic gives the same bits.
func putScaleQ3K(sc *[12]byte, j int, l uint8) {
	if j < 8 {
		sc[j] = l & 0xf
	} else {
		sc[j-8] |= (l & 0xf) << 4
	}
	sc[j%4+8] |= l >> 4 << (2 * (j / 4))
}

// scaleQ3K returns the signed scale of sub-block j (code minus 32).
func scaleQ3K(sc *[12]byte, j int) int8 {
	var lo uint8
	if j < 8 {
		lo = sc[j] & 0xf
	} else {
		lo = sc[j-8] >> 4
	}
	return int8(lo|(sc[8+j%4]>>(2*(j/4))&3)<<4) - 32
}

func dequantizeQ3K(dst []float32, src []byte) {
	nb := len(dst) / qkBlock
	for i := range nb {
		b := (*[q3KBytes]byte)(src[i*q3KBytes:])
		y := (*[qkBlock]float32)(dst[i*qkBlock:])
		d := half(b[108:])
		sc := (*[12]byte)(b[96:108])
		hm := (*[32]byte)(b[0:32])
		for s := range 16 {
			dl := d * float32(scaleQ3K(sc, s))
			off := 16 * (s % 2)
			q := (*[16]byte)(b[32+32*(s/8)+off:])
			h := (*[16]byte)(hm[off:])
			shift := uint(2 * ((s / 2) % 4))
			m := uint8(1) << (s / 2)
			o := (*[16]float32)(y[16*s:])
			for l, v := range q {
				lv := int32((v >> shift) & 3)
				if h[l]&m == 0 {
					lv -= 4
				}
				o[l] = dl * float32(lv)
			}
		}
	}
}

package quant

import "github.com/sdtool/sdtool/formats"

// iq4_nl: blocks of 32 whose 4-bit codes index the 16 non-linear levels of
// iq4nlValues (defined beside iq4_xs), with one f16 scale. Block: f16 d,
// qs[16] (byte j holds element j in its low nibble and j+16 in its high).
//
// ggml_quantize_chunk always runs quantize_row_iq4_nl_impl with 7 tries:
// without importance weights each element is weighted by x², with them by
// w·sqrt(σ² + x²), where σ² is twice the block's mean square (per block of
// 32, unlike the legacy types' per-row σ²). NaN and Inf give whatever ggml's
// arithmetic gives (checked against the linked ggml).

const iq4nlBytes = 18

func init() {
	Register(Codec{Type: formats.IQ4_NL, Quantize: quantizeIQ4NL, Dequantize: dequantizeIQ4NL, UsesWeights: true})
}

func quantizeIQ4NL(dst []byte, src, weights []float32) {
	nb := len(src) / 32
	dst = dst[:nb*iq4nlBytes]
	for i := range nb {
		var qw *[32]float32
		if weights != nil {
			qw = (*[32]float32)(weights[i*32:])
		}
		quantizeBlockIQ4NL((*[iq4nlBytes]byte)(dst[i*iq4nlBytes:]), (*[32]float32)(src[i*32:]), qw)
	}
}

// quantizeBlockIQ4NL is quantize_row_iq4_nl_impl for one block of 32 with
// ntry 7: a first scale from the element of largest magnitude, 15 more
// trial scales around it, the best weighted least-squares scale, and the
// codes re-picked for that scale.
func quantizeBlockIQ4NL(y *[iq4nlBytes]byte, x, qw *[32]float32) {
	const ntry = 7
	v0 := float32(iq4nlValues[0])
	var sigma2 float32
	for _, v := range x {
		sigma2 += float32(v * v)
	}
	// An explicit conversion keeps the scaling from fusing into sigma2+v*v.
	sigma2 = float32(sigma2 * (2.0 / 32))
	var w [32]float32
	if qw != nil {
		for j, v := range x {
			w[j] = qw[j] * cSqrtf(sigma2+float32(v*v))
		}
	} else {
		for j, v := range x {
			w[j] = v * v
		}
	}
	var amax, xmax float32
	for _, v := range x {
		if ax := cFabs(v); ax > amax {
			amax, xmax = ax, v
		}
	}
	var scale float32
	if amax >= 1e-15 { // GROUP_MAX_EPS; below it the scale stays 0
		d := -xmax / v0
		id := 1 / d
		var sumqx, sumq2 float32
		for j, v := range x {
			q := float32(iq4nlValues[bestIndexIQ4(id*v)&15])
			wq := float32(w[j] * q)
			sumqx += float32(wq * v)
			sumq2 += float32(wq * q)
		}
		d = sumqx / sumq2
		best := d * sumqx
		for itry := -ntry; itry <= ntry; itry++ {
			id = float32(itry+int(iq4nlValues[0])) / xmax
			sumqx, sumq2 = 0, 0
			for j, v := range x {
				q := float32(iq4nlValues[bestIndexIQ4(id*v)&15])
				wq := float32(w[j] * q)
				sumqx += float32(wq * v)
				sumq2 += float32(wq * q)
			}
			if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
				d = sumqx / sumq2
				best = d * sumqx
			}
		}
		scale = d
	}
	putHalf(y[0:], scale)
	var id float32
	if scale != 0 {
		id = 1 / scale
	}
	for j := range 16 {
		y[2+j] = bestIndexIQ4(id*x[j]) | bestIndexIQ4(id*x[j+16])<<4
	}
}

func dequantizeIQ4NL(dst []float32, src []byte) {
	nb := len(dst) / 32
	src = src[:nb*iq4nlBytes]
	for i := range nb {
		x, y := (*[iq4nlBytes]byte)(src[i*iq4nlBytes:]), (*[32]float32)(dst[i*32:])
		d := half(x[0:])
		for j := range 16 {
			q := x[2+j]
			y[j] = d * float32(iq4nlValues[q&15])
			y[j+16] = d * float32(iq4nlValues[q>>4])
		}
	}
}

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
		scale = iq4Search(x, &w, xmax)
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

// iq4Search is the scale search of quantize_row_iq4_nl_impl (ntry 7) for
// one block of 32 whose element of largest magnitude is xmax: the first
// scale -xmax/-127, refined by weighted least squares, and 15 trial scales
// (itry-127)/xmax, each kept when its fit beats the best so far. The trial
// scales do not depend on each other, so all 16 candidates' sums are formed
// first, four at a time so that their dependency chains overlap, and then
// compared in ggml's order.
func iq4Search(x, w *[32]float32, xmax float32) float32 {
	var ids, sqx, sq2 [16]float32
	d := -xmax / float32(iq4nlValues[0])
	ids[0] = 1 / d
	for k := 1; k < 16; k++ {
		ids[k] = float32(k-8+int(iq4nlValues[0])) / xmax
	}
	if amaxBits := absMaxBits(x); amaxBits < 0x7f800000 {
		for k := 0; k < 16; k += 4 {
			iq4Sums4(x, w, (*[4]float32)(ids[k:]), (*[4]float32)(sqx[k:]), (*[4]float32)(sq2[k:]))
		}
	} else {
		// An Inf or NaN element: products may be NaN, which only
		// bestIndexIQ4 maps as ggml does.
		for k, id := range ids {
			var sumqx, sumq2 float32
			for j, v := range x {
				q := iq4nlFloats[bestIndexIQ4(id*v)&15]
				wq := float32(w[j] * q)
				sumqx += float32(wq * v)
				sumq2 += float32(wq * q)
			}
			sqx[k], sq2[k] = sumqx, sumq2
		}
	}
	d = sqx[0] / sq2[0]
	best := d * sqx[0]
	for k := 1; k < 16; k++ {
		sumqx, sumq2 := sqx[k], sq2[k]
		if sumq2 > 0 && float32(sumqx*sumqx) > float32(best*sumq2) {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

// iq4Sums4 forms the weighted sums q*w*x and q*w*q of four candidate
// inverse scales id, q being the level nearest to id*x, in ggml's order.
// Every id*x must be below 256 in magnitude.
func iq4Sums4(x, w *[32]float32, id, sqx, sq2 *[4]float32) {
	i0, i1, i2, i3 := id[0], id[1], id[2], id[3]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for j, v := range x {
		wj := w[j]
		q0 := iq4Level(i0 * v)
		q1 := iq4Level(i1 * v)
		q2 := iq4Level(i2 * v)
		q3 := iq4Level(i3 * v)
		w0, w1, w2, w3 := float32(wj*q0), float32(wj*q1), float32(wj*q2), float32(wj*q3)
		a0 += float32(w0 * v)
		a1 += float32(w1 * v)
		a2 += float32(w2 * v)
		a3 += float32(w3 * v)
		b0 += float32(w0 * q0)
		b1 += float32(w1 * q1)
		b2 += float32(w2 * q2)
		b3 += float32(w3 * q3)
	}
	sqx[0], sqx[1], sqx[2], sqx[3] = a0, a1, a2, a3
	sq2[0], sq2[1], sq2[2], sq2[3] = b0, b1, b2, b3
}

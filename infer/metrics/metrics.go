package metrics

import (
	"errors"
	"fmt"
	"image"
	"math"
)

// ErrSize is returned (wrapped) when two images or tensors cannot be compared because their sizes differ
// or are too small.
var ErrSize = errors.New("sizes do not match")

// SSIM constants of Wang et al. (2004): an 11x11 Gaussian window of standard deviation 1.5, K1 = 0.01,
// K2 = 0.03, dynamic range 255.
const (
	ssimWindow = 11
	ssimSigma  = 1.5
	ssimC1     = (0.01 * 255) * (0.01 * 255)
	ssimC2     = (0.03 * 255) * (0.03 * 255)
)

// rgbPlanes returns the R, G and B values of img (0..255) as three planes of float64, row-major.
// Alpha is ignored (generated images are opaque); other colour models go through color.RGBA.
func rgbPlanes(img image.Image) (w, h int, planes [3][]float64) {
	b := img.Bounds()
	w, h = b.Dx(), b.Dy()
	for c := range planes {
		planes[c] = make([]float64, w*h)
	}
	switch m := img.(type) {
	case *image.RGBA:
		for y := 0; y < h; y++ {
			row := m.Pix[(y+b.Min.Y-m.Rect.Min.Y)*m.Stride+(b.Min.X-m.Rect.Min.X)*4:]
			for x := 0; x < w; x++ {
				for c := 0; c < 3; c++ {
					planes[c][y*w+x] = float64(row[4*x+c])
				}
			}
		}
	case *image.NRGBA:
		for y := 0; y < h; y++ {
			row := m.Pix[(y+b.Min.Y-m.Rect.Min.Y)*m.Stride+(b.Min.X-m.Rect.Min.X)*4:]
			for x := 0; x < w; x++ {
				for c := 0; c < 3; c++ {
					planes[c][y*w+x] = float64(row[4*x+c])
				}
			}
		}
	default:
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				r, g, bb, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
				planes[0][y*w+x] = float64(r >> 8)
				planes[1][y*w+x] = float64(g >> 8)
				planes[2][y*w+x] = float64(bb >> 8)
			}
		}
	}
	return w, h, planes
}

func samePlanes(a, b image.Image) (w, h int, pa, pb [3][]float64, err error) {
	if a.Bounds().Dx() != b.Bounds().Dx() || a.Bounds().Dy() != b.Bounds().Dy() {
		return 0, 0, pa, pb, fmt.Errorf("%w: %dx%d vs %dx%d", ErrSize, a.Bounds().Dx(), a.Bounds().Dy(), b.Bounds().Dx(), b.Bounds().Dy())
	}
	w, h, pa = rgbPlanes(a)
	_, _, pb = rgbPlanes(b)
	if w == 0 || h == 0 {
		return 0, 0, pa, pb, fmt.Errorf("%w: empty image", ErrSize)
	}
	return w, h, pa, pb, nil
}

// PSNR returns the peak signal-to-noise ratio of two images of equal size in dB: 10*log10(255²/MSE), the
// mean squared error taken over the R, G and B values of every pixel (8-bit). Identical images give +Inf.
func PSNR(a, b image.Image) (float64, error) {
	_, _, pa, pb, err := samePlanes(a, b)
	if err != nil {
		return 0, err
	}
	var sum float64
	n := 0
	for c := 0; c < 3; c++ {
		for i, v := range pa[c] {
			d := v - pb[c][i]
			sum += d * d
		}
		n += len(pa[c])
	}
	if sum == 0 {
		return math.Inf(1), nil
	}
	return 10 * math.Log10(255*255/(sum/float64(n))), nil
}

// gaussianWindow returns the normalised 1-D Gaussian of the SSIM window.
func gaussianWindow() []float64 {
	g := make([]float64, ssimWindow)
	var sum float64
	for i := range g {
		x := float64(i - ssimWindow/2)
		g[i] = math.Exp(-x * x / (2 * ssimSigma * ssimSigma))
		sum += g[i]
	}
	for i := range g {
		g[i] /= sum
	}
	return g
}

// filterValid convolves the w x h plane p with the separable window g in both directions, keeping only
// the positions where the window fits (a (w-10) x (h-10) result, MATLAB's filter2 'valid').
func filterValid(p []float64, w, h int, g []float64, tmp, out []float64) {
	k := len(g)
	ow, oh := w-k+1, h-k+1
	// Horizontal pass: tmp is ow x h.
	for y := 0; y < h; y++ {
		row := p[y*w : y*w+w]
		for x := 0; x < ow; x++ {
			var s float64
			for i, gv := range g {
				s += gv * row[x+i]
			}
			tmp[y*ow+x] = s
		}
	}
	// Vertical pass: out is ow x oh.
	for y := 0; y < oh; y++ {
		for x := 0; x < ow; x++ {
			var s float64
			for i, gv := range g {
				s += gv * tmp[(y+i)*ow+x]
			}
			out[y*ow+x] = s
		}
	}
}

// SSIM returns the structural similarity of two images of equal size (at least 11x11): the SSIM index of
// Wang et al. (2004), with its 11x11 Gaussian window (sigma 1.5), K1 = 0.01, K2 = 0.03 and L = 255,
// averaged over the positions where the window fits inside the image (no padding), computed on R, G and
// B separately and averaged over the three channels. Identical images give 1.
func SSIM(a, b image.Image) (float64, error) {
	w, h, pa, pb, err := samePlanes(a, b)
	if err != nil {
		return 0, err
	}
	if w < ssimWindow || h < ssimWindow {
		return 0, fmt.Errorf("%w: SSIM needs at least %dx%d pixels, got %dx%d", ErrSize, ssimWindow, ssimWindow, w, h)
	}
	g := gaussianWindow()
	ow, oh := w-ssimWindow+1, h-ssimWindow+1
	tmp := make([]float64, ow*h)
	prod := make([]float64, w*h)
	muA, muB := make([]float64, ow*oh), make([]float64, ow*oh)
	sAA, sBB, sAB := make([]float64, ow*oh), make([]float64, ow*oh), make([]float64, ow*oh)
	var total float64
	for c := 0; c < 3; c++ {
		x, y := pa[c], pb[c]
		filterValid(x, w, h, g, tmp, muA)
		filterValid(y, w, h, g, tmp, muB)
		for i := range prod {
			prod[i] = x[i] * x[i]
		}
		filterValid(prod, w, h, g, tmp, sAA)
		for i := range prod {
			prod[i] = y[i] * y[i]
		}
		filterValid(prod, w, h, g, tmp, sBB)
		for i := range prod {
			prod[i] = x[i] * y[i]
		}
		filterValid(prod, w, h, g, tmp, sAB)
		var sum float64
		for i := range muA {
			ma, mb := muA[i], muB[i]
			va, vb, cov := sAA[i]-ma*ma, sBB[i]-mb*mb, sAB[i]-ma*mb
			sum += ((2*ma*mb + ssimC1) * (2*cov + ssimC2)) / ((ma*ma + mb*mb + ssimC1) * (va + vb + ssimC2))
		}
		total += sum / float64(ow*oh)
	}
	return total / 3, nil
}

// CosineSimilarity returns the cosine of the angle between a and b (accumulated in float64). Two zero
// vectors count as identical (1); a zero vector against a non-zero one gives 0.
func CosineSimilarity(a, b []float32) (float64, error) {
	if len(a) != len(b) {
		return 0, fmt.Errorf("%w: %d vs %d values", ErrSize, len(a), len(b))
	}
	var dot, na, nb float64
	for i, x := range a {
		y := float64(b[i])
		dot += float64(x) * y
		na += float64(x) * float64(x)
		nb += y * y
	}
	switch {
	case na == 0 && nb == 0:
		return 1, nil
	case na == 0 || nb == 0:
		return 0, nil
	}
	return dot / (math.Sqrt(na) * math.Sqrt(nb)), nil
}

// TensorDiff summarises how far a tensor (b) is from a reference (a).
type TensorDiff struct {
	// Cosine is the cosine similarity (1 = same direction).
	Cosine float64
	// RMSE is the root mean squared difference.
	RMSE float64
	// MaxAbs is the largest absolute difference.
	MaxAbs float64
	// RelRMSE is RMSE divided by the reference's root mean square (0 when the reference is all zeros and
	// b equals it, +Inf when only the reference is zero).
	RelRMSE float64
}

// CompareTensors measures b against the reference a (for example a UNet block's output with converted
// weights against the original's).
func CompareTensors(a, b []float32) (TensorDiff, error) {
	cos, err := CosineSimilarity(a, b)
	if err != nil {
		return TensorDiff{}, err
	}
	var se, ref, maxAbs float64
	for i, x := range a {
		d := float64(b[i]) - float64(x)
		se += d * d
		ref += float64(x) * float64(x)
		maxAbs = max(maxAbs, math.Abs(d))
	}
	e := TensorDiff{Cosine: cos, MaxAbs: maxAbs}
	if n := len(a); n > 0 {
		e.RMSE = math.Sqrt(se / float64(n))
		switch {
		case ref > 0:
			e.RelRMSE = math.Sqrt(se / ref)
		case se > 0:
			e.RelRMSE = math.Inf(1)
		}
	}
	return e, nil
}

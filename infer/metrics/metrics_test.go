package metrics

import (
	"errors"
	"image"
	"image/color"
	"math"
	"math/rand/v2"
	"testing"
)

func randomImage(w, h int, seed uint64) *image.RGBA {
	r := rand.New(rand.NewPCG(seed, 1))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(r.IntN(256))
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	return img
}

func flatImage(w, h int, v uint8) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = v
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	return img
}

// mapImage returns a copy of img with f applied to R, G and B.
func mapImage(img *image.RGBA, f func(i int, v uint8) uint8) *image.RGBA {
	out := image.NewRGBA(img.Rect)
	copy(out.Pix, img.Pix)
	for i := range out.Pix {
		if i%4 != 3 {
			out.Pix[i] = f(i, out.Pix[i])
		}
	}
	return out
}

func TestPSNRKnownValues(t *testing.T) {
	a := randomImage(32, 24, 1)
	if p, err := PSNR(a, a); err != nil || !math.IsInf(p, 1) {
		t.Fatalf("identical: %v, %v", p, err)
	}
	// A mid-grey image against itself +-d (alternating, never clipped): MSE = d², PSNR = 20 log10(255/d).
	g := flatImage(16, 16, 128)
	for _, d := range []int{1, 5, 20} {
		noisy := mapImage(g, func(i int, v uint8) uint8 {
			if i%2 == 0 {
				return uint8(int(v) + d)
			}
			return uint8(int(v) - d)
		})
		p, err := PSNR(g, noisy)
		if err != nil {
			t.Fatal(err)
		}
		if want := 20 * math.Log10(255/float64(d)); math.Abs(p-want) > 1e-9 {
			t.Errorf("d=%d: PSNR %v, want %v", d, p, want)
		}
	}
	// Black against white: MSE 255², 0 dB.
	if p, _ := PSNR(flatImage(4, 4, 0), flatImage(4, 4, 255)); math.Abs(p) > 1e-12 {
		t.Errorf("black/white: %v dB", p)
	}
}

// ssimBrute is SSIM written directly from its definition (a 2-D window sum at every valid position) as an
// oracle for the separable implementation.
func ssimBrute(a, b *image.RGBA) float64 {
	w, h := a.Rect.Dx(), a.Rect.Dy()
	g := gaussianWindow()
	var total float64
	for c := 0; c < 3; c++ {
		px := func(img *image.RGBA, x, y int) float64 { return float64(img.Pix[y*img.Stride+4*x+c]) }
		var sum float64
		n := 0
		for y0 := 0; y0+ssimWindow <= h; y0++ {
			for x0 := 0; x0+ssimWindow <= w; x0++ {
				var ma, mb float64
				for j := 0; j < ssimWindow; j++ {
					for i := 0; i < ssimWindow; i++ {
						wt := g[i] * g[j]
						ma += wt * px(a, x0+i, y0+j)
						mb += wt * px(b, x0+i, y0+j)
					}
				}
				var va, vb, cov float64
				for j := 0; j < ssimWindow; j++ {
					for i := 0; i < ssimWindow; i++ {
						wt := g[i] * g[j]
						da, db := px(a, x0+i, y0+j)-ma, px(b, x0+i, y0+j)-mb
						va += wt * da * da
						vb += wt * db * db
						cov += wt * da * db
					}
				}
				sum += ((2*ma*mb + ssimC1) * (2*cov + ssimC2)) / ((ma*ma + mb*mb + ssimC1) * (va + vb + ssimC2))
				n++
			}
		}
		total += sum / float64(n)
	}
	return total / 3
}

func TestSSIM(t *testing.T) {
	a := randomImage(23, 17, 2)
	if s, err := SSIM(a, a); err != nil || math.Abs(s-1) > 1e-12 {
		t.Fatalf("identical: %v, %v", s, err)
	}
	// Against the direct definition, for a structured pair.
	r := rand.New(rand.NewPCG(3, 3))
	b := mapImage(a, func(_ int, v uint8) uint8 { return uint8(max(0, min(255, int(v)+r.IntN(61)-30))) })
	got, err := SSIM(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if want := ssimBrute(a, b); math.Abs(got-want) > 1e-9 {
		t.Fatalf("SSIM %v, definition %v", got, want)
	}
	if sym, _ := SSIM(b, a); math.Abs(sym-got) > 1e-12 {
		t.Fatalf("not symmetric: %v vs %v", got, sym)
	}
	// Flat images: the structure term is C2/C2 = 1, so SSIM is the luminance term alone.
	for _, c := range []struct{ u, v uint8 }{{100, 100}, {100, 110}, {0, 255}} {
		s, _ := SSIM(flatImage(12, 12, c.u), flatImage(12, 12, c.v))
		x, y := float64(c.u), float64(c.v)
		if want := (2*x*y + ssimC1) / (x*x + y*y + ssimC1); math.Abs(s-want) > 1e-12 {
			t.Errorf("flat %d/%d: %v, want %v", c.u, c.v, s, want)
		}
	}
	// More noise, less similarity.
	prev := 1.0
	for _, amp := range []int{5, 20, 60} {
		rr := rand.New(rand.NewPCG(4, 4))
		n := mapImage(a, func(_ int, v uint8) uint8 { return uint8(max(0, min(255, int(v)+rr.IntN(2*amp+1)-amp))) })
		s, _ := SSIM(a, n)
		if !(s < prev) {
			t.Errorf("noise %d: SSIM %v not below %v", amp, s, prev)
		}
		prev = s
	}
}

func TestMetricsSizes(t *testing.T) {
	if _, err := PSNR(flatImage(4, 4, 0), flatImage(4, 5, 0)); !errors.Is(err, ErrSize) {
		t.Errorf("PSNR size mismatch: %v", err)
	}
	if _, err := SSIM(flatImage(10, 30, 0), flatImage(10, 30, 0)); !errors.Is(err, ErrSize) {
		t.Errorf("SSIM on 10 px: %v", err)
	}
	if _, err := PSNR(flatImage(0, 0, 0), flatImage(0, 0, 0)); !errors.Is(err, ErrSize) {
		t.Errorf("empty: %v", err)
	}
	if _, err := CosineSimilarity([]float32{1}, []float32{1, 2}); !errors.Is(err, ErrSize) {
		t.Errorf("cosine length mismatch: %v", err)
	}
}

func TestMetricsImageTypes(t *testing.T) {
	// The NRGBA fast path, a sub-image and the generic path (Gray) agree with RGBA.
	a := randomImage(20, 20, 5)
	gray := image.NewGray(a.Rect)
	nrgba := image.NewNRGBA(a.Rect)
	for y := 0; y < 20; y++ {
		for x := 0; x < 20; x++ {
			c := a.RGBAAt(x, y)
			nrgba.SetNRGBA(x, y, color.NRGBA{c.R, c.G, c.B, 255})
			gray.SetGray(x, y, color.Gray{c.G})
		}
	}
	if p, _ := PSNR(a, nrgba); !math.IsInf(p, 1) {
		t.Errorf("RGBA vs NRGBA: %v", p)
	}
	sub := a.SubImage(image.Rect(3, 4, 17, 19)).(*image.RGBA)
	subCopy := image.NewRGBA(image.Rect(0, 0, 14, 15))
	for y := 0; y < 15; y++ {
		for x := 0; x < 14; x++ {
			subCopy.SetRGBA(x, y, a.RGBAAt(x+3, y+4))
		}
	}
	if s, _ := SSIM(sub, subCopy); math.Abs(s-1) > 1e-12 {
		t.Errorf("sub-image: %v", s)
	}
	greyRGBA := mapImage(a, func(i int, _ uint8) uint8 { return a.Pix[i-i%4+1] })
	if p, _ := PSNR(gray, greyRGBA); !math.IsInf(p, 1) {
		t.Errorf("Gray vs RGBA: %v", p)
	}
}

func TestCosineSimilarity(t *testing.T) {
	cases := []struct {
		a, b []float32
		want float64
	}{
		{[]float32{1, 2, 3}, []float32{2, 4, 6}, 1},
		{[]float32{1, 0}, []float32{0, 1}, 0},
		{[]float32{1, 1}, []float32{-1, -1}, -1},
		{[]float32{3, 4}, []float32{4, 3}, 24.0 / 25},
		{[]float32{0, 0}, []float32{0, 0}, 1},
		{[]float32{0, 0}, []float32{1, 0}, 0},
	}
	for _, c := range cases {
		if got, err := CosineSimilarity(c.a, c.b); err != nil || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("cos(%v, %v) = %v, %v; want %v", c.a, c.b, got, err, c.want)
		}
	}
	e, err := CompareTensors([]float32{3, 4}, []float32{3, 5})
	if err != nil || e.MaxAbs != 1 || math.Abs(e.RMSE-math.Sqrt(0.5)) > 1e-12 || math.Abs(e.RelRMSE-0.2) > 1e-12 {
		t.Fatalf("CompareTensors: %+v, %v", e, err)
	}
	if e, _ := CompareTensors([]float32{0}, []float32{1}); !math.IsInf(e.RelRMSE, 1) {
		t.Fatalf("zero reference: %+v", e)
	}
}

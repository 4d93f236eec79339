package infer

import (
	"errors"
	"fmt"
	"image"
)

// ErrImageSize is returned (wrapped) when a tensor's length does not match the image size it is said to hold.
var ErrImageSize = errors.New("tensor size does not match the image size")

// ImageFromCHW converts a decoded image tensor (3 planes of h x w values in [-1, 1], planar R, G, B, as
// the VAE decoder outputs it) to an opaque RGBA image the way sd.cpp does: (x+1)/2 clamped to [0, 1],
// times 255, truncated. A NaN becomes white, as in sd.cpp, whose clamp is std::min(1, v) (the bound
// when v does not compare below it) and then std::max(0, ...): an image of weights that overflow looks
// the same in both programs.
func ImageFromCHW(data []float32, w, h int) (*image.RGBA, error) {
	if w <= 0 || h <= 0 || len(data) != 3*w*h {
		return nil, fmt.Errorf("%w: %d values for a 3x%dx%d image", ErrImageSize, len(data), h, w)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	plane := w * h
	for i := 0; i < plane; i++ {
		for c := 0; c < 3; c++ {
			v := (data[c*plane+i] + 1) * 0.5
			if !(v < 1) { // NaN too: Go's min would keep it
				v = 1
			}
			v = max(0, v)
			img.Pix[4*i+c] = uint8(v * 255)
		}
		img.Pix[4*i+3] = 255
	}
	return img, nil
}

// CHWFromImage converts an image to the VAE encoder's input: planar R, G, B in [-1, 1] (value/255*2-1),
// alpha ignored, and returns the width and height. RGBA and NRGBA images are read as stored (8 bits per
// channel, NRGBA's unpremultiplied values); other colour models go through color.RGBA.
func CHWFromImage(img image.Image) (data []float32, w, h int) {
	b := img.Bounds()
	w, h = b.Dx(), b.Dy()
	data = make([]float32, 3*w*h)
	plane := w * h
	set := func(i int, r, g, bl uint8) {
		data[i] = float32(r)/255*2 - 1
		data[plane+i] = float32(g)/255*2 - 1
		data[2*plane+i] = float32(bl)/255*2 - 1
	}
	var pix []uint8
	var stride int
	var rect image.Rectangle
	switch m := img.(type) {
	case *image.RGBA:
		pix, stride, rect = m.Pix, m.Stride, m.Rect
	case *image.NRGBA:
		pix, stride, rect = m.Pix, m.Stride, m.Rect
	}
	for y := 0; y < h; y++ {
		if pix != nil {
			row := pix[(y+b.Min.Y-rect.Min.Y)*stride+(b.Min.X-rect.Min.X)*4:]
			for x := 0; x < w; x++ {
				set(y*w+x, row[4*x], row[4*x+1], row[4*x+2])
			}
			continue
		}
		for x := 0; x < w; x++ {
			r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			set(y*w+x, uint8(r>>8), uint8(g>>8), uint8(bl>>8))
		}
	}
	return data, w, h
}

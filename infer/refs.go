package infer

import (
	"fmt"
	"math"
)

// Reference images (sd-cli's -r, its edit mode) for a family whose network
// reads them (Family.RefLatents): each image is resized, with sd-cli's
// nearest-neighbour rule, to about the render's area (at most 1024²
// pixels) in multiples of the model's size step, encoded by the VAE (its
// mean: the families that take references have a mean-only VAE, so no
// noise is drawn and the starting noise is the same as without them) and
// given to every network call, the unconditional pass included
// (NetInput.Refs). Image guidance (sd-cli's --img-cfg-scale) is not run.

// RefImage is one reference image.
type RefImage struct {
	// Pixels are the image [3, Height, Width] in [-1, 1] (CHWFromImage).
	Pixels []float32
	// Width and Height are its size in pixels.
	Width, Height int
}

// RefLatent is a reference image's latent as a network reads it.
type RefLatent struct {
	// X is the latent [C, H, W], in the same layout and scale as the render's.
	X []float32
	// W and H are its width and height in latent cells.
	W, H int
}

// refMaxPixels is the largest area sd-cli encodes a reference at.
const refMaxPixels = 1024 * 1024

// RefSize returns the size sd-cli encodes a refW×refH reference at for a
// width×height render: the area of the smaller of the render and 1024²
// pixels with the reference's aspect, each side rounded to a multiple of
// step. The integer division before the square root is sd-cli's.
func RefSize(width, height, refW, refH, step int) (int, int) {
	area := int64(min(refMaxPixels, width*height))
	w := math.Sqrt(float64(area * int64(refW) / int64(refH)))
	h := w * float64(refH) / float64(refW)
	s := float64(step)
	return int(math.Round(w/s) * s), int(math.Round(h/s) * s)
}

// ResizeNearest resizes pixels [C, h, w] to [C, nh, nw], each output pixel
// taking the input pixel at out·in/size in integer arithmetic, as sd-cli's
// nearest interpolation does.
func ResizeNearest(pixels []float32, w, h, nw, nh int) []float32 {
	if nw == w && nh == h {
		return pixels
	}
	c := len(pixels) / (w * h)
	out := make([]float32, c*nw*nh)
	for ch := range c {
		src, dst := pixels[ch*w*h:], out[ch*nw*nh:]
		for y := range nh {
			sy := y * h / nh
			for x := range nw {
				dst[y*nw+x] = src[sy*w+x*w/nw]
			}
		}
	}
	return out
}

// checkRefs refuses reference images that the model does not read or that
// are malformed.
func (m *Model) checkRefs(req *Request) error {
	if len(req.Refs) == 0 {
		return nil
	}
	fam := m.Family
	if !fam.RefLatents {
		if fam.RefsNeed != "" {
			return fmt.Errorf("%s: reference images are not supported: %s", fam.Title, fam.RefsNeed)
		}
		return fmt.Errorf("%s: reference images are not supported: this model generates from text (and an init image) only", fam.Title)
	}
	for i, r := range req.Refs {
		if r.Width <= 0 || r.Height <= 0 || len(r.Pixels) != 3*r.Width*r.Height {
			return fmt.Errorf("reference image %d: %d values for %dx%d pixels", i+1, len(r.Pixels), r.Width, r.Height)
		}
	}
	return nil
}

// refLatents encodes req's reference images as sd-cli does (RefSize,
// ResizeNearest, the VAE's mean).
func (m *Model) refLatents(req *Request) ([]RefLatent, error) {
	if len(req.Refs) == 0 {
		return nil, nil
	}
	_, _, step := m.AlignSize(req.Width, req.Height)
	down := m.Family.VAE.down()
	out := make([]RefLatent, len(req.Refs))
	for i, r := range req.Refs {
		w, h := RefSize(req.Width, req.Height, r.Width, r.Height, step)
		if w <= 0 || h <= 0 {
			return nil, fmt.Errorf("reference image %d of %dx%d: resized to %dx%d for a %dx%d render, nothing is left to encode",
				i+1, r.Width, r.Height, w, h, req.Width, req.Height)
		}
		z, err := m.EncodeLatent(ResizeNearest(r.Pixels, r.Width, r.Height, w, h), w, h, nil)
		if err != nil {
			return nil, fmt.Errorf("reference image %d: %w", i+1, err)
		}
		out[i] = RefLatent{X: z, W: w / down, H: h / down}
	}
	return out, nil
}

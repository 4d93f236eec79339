package infer

import (
	"fmt"
	"image"
)

// DecodeVideo decodes a diffusion latent video [C, frames, h, w] and
// returns its frames of pixels [n][3][H][W], nominally in [-1, 1], and n.
// A video VAE decodes the latent frames together (its kind's decodeVideo);
// any other VAE decodes each latent frame as an image, one frame each.
func (m *Model) DecodeVideo(latent []float32, w, h, frames int) ([]float32, int, error) {
	if frames <= 0 || w <= 0 || h <= 0 || len(latent)%(frames*w*h) != 0 {
		return nil, 0, fmt.Errorf("%s: a latent video of %d values is not %d frames of %dx%d", m.Path, len(latent), frames, w, h)
	}
	if k := vaeKinds[m.Config.VAE.Kind]; k.DecodeVideo != nil {
		return k.DecodeVideo(m, latent, w, h, frames)
	}
	c, cell := len(latent)/(frames*w*h), w*h
	frame := make([]float32, c*cell)
	var out []float32
	for f := 0; f < frames; f++ {
		for ch := 0; ch < c; ch++ {
			copy(frame[ch*cell:(ch+1)*cell], latent[(ch*frames+f)*cell:])
		}
		px, err := m.DecodeLatent(frame, w, h)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, px...)
	}
	return out, frames, nil
}

// FrameImages converts a result's frames (Result.Pixels, Result.Frames of
// them) to images, as ImageFromCHW converts one.
func FrameImages(res *Result) ([]*image.RGBA, error) {
	n := max(res.Frames, 1)
	size := 3 * res.Width * res.Height
	if len(res.Pixels) != n*size {
		return nil, fmt.Errorf("%d pixel values for %d frames of %dx%d", len(res.Pixels), n, res.Width, res.Height)
	}
	out := make([]*image.RGBA, n)
	for i := range out {
		img, err := ImageFromCHW(res.Pixels[i*size:(i+1)*size], res.Width, res.Height)
		if err != nil {
			return nil, err
		}
		out[i] = img
	}
	return out, nil
}

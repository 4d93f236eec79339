package infer

import "fmt"

// EncodeVideo encodes n frames of pixels [n][3][H][W] in [-1, 1] to a
// diffusion latent video [C, frames, H/down, W/down] and returns frames.
// A video VAE encodes the frames together (its kind's encodeVideo: Wan's
// packs the first frame, then every four, into a latent frame); any other
// VAE encodes each frame as an image.
func (m *Model) EncodeVideo(pixels []float32, w, h, n int) ([]float32, int, error) {
	if n <= 0 || w <= 0 || h <= 0 || len(pixels) != 3*n*w*h {
		return nil, 0, fmt.Errorf("%s: %d pixel values are not %d frames of %dx%d", m.Path, len(pixels), n, w, h)
	}
	if k := vaeKinds[m.Config.VAE.Kind]; k.EncodeVideo != nil {
		return k.EncodeVideo(m, pixels, w, h, n)
	}
	var lat [][]float32
	for f := range n {
		z, err := m.EncodeImage(pixels[f*3*w*h:(f+1)*3*w*h], w, h)
		if err != nil {
			return nil, 0, err
		}
		lat = append(lat, z)
	}
	return ChannelsMajor(lat, m.Config.VAE.ZChannels), n, nil
}

// ChannelsMajor joins latent frames [C, h, w] into a video [C, frames, h, w].
func ChannelsMajor(frames [][]float32, c int) []float32 {
	cell := len(frames[0]) / c
	out := make([]float32, len(frames)*len(frames[0]))
	for f, z := range frames {
		for ch := range c {
			copy(out[(ch*len(frames)+f)*cell:(ch*len(frames)+f+1)*cell], z[ch*cell:(ch+1)*cell])
		}
	}
	return out
}

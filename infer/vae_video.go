package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// DecodeVideo runs the VAE decoder on t diffusion latent frames [t, Z, h,
// w] and returns the pixel frames [F, 3, H, W], nominally in [-1, 1], with
// F: 1 + TemporalFactor·(t-1) for a video VAE, t for an image VAE (each
// frame decoded alone).
func (m *Model) DecodeVideo(latent []float32, t, w, h int) ([]float32, int, error) {
	cfg := &m.Config.VAE
	n := cfg.ZChannels * w * h
	if t <= 0 || len(latent) != t*n {
		return nil, 0, fmt.Errorf("%s: %d latent values for %d frames of %dx%dx%d", m.Path, len(latent), t, cfg.ZChannels, h, w)
	}
	if dec := vaeKinds[cfg.Kind].decodeFrames; dec != nil {
		z := make([]float32, len(latent))
		for i, v := range latent {
			z[i] = v/cfg.ScaleFactor + cfg.ShiftFactor
		}
		return dec(m, cfg, z, t, w, h)
	}
	var out []float32
	for i := range t {
		px, err := m.DecodeLatent(latent[i*n:(i+1)*n], w, h)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, px...)
	}
	return out, t, nil
}

// decodeWanFrames decodes a Wan VAE's latent frames one graph per latent
// frame, as sd.cpp chunks them: frame 0 alone gives one frame, each later
// one four, and the causal convolutions' caches carry over between graphs
// (in Go memory, so that a graph holds one chunk's activations).
func decodeWanFrames(m *Model, c *VAEConfig, z []float32, t, w, h int) ([]float32, int, error) {
	cfg := c.Layout.(*WanVAEConfig)
	n := c.ZChannels * w * h
	var caches []wanCache
	var out []float32
	frames := 0
	for i := range t {
		var next []native.Tensor
		err := m.compute(func(g *builder) ([]input, native.Tensor) {
			r := &wanRun{g: g, cfg: cfg, chunk: i, prev: caches}
			zt := newInput(g, formats.F32, int64(w), int64(h), int64(c.ZChannels), 1)
			px := r.decode(zt)
			for _, t := range r.next {
				if t.Valid() {
					g.output(t)
				}
			}
			next = r.next
			return []input{{t: zt, f32: z[i*n : (i+1)*n]}}, px
		}, func(o native.Tensor) error {
			v, err := o.F32()
			if err != nil {
				return err
			}
			out = append(out, v...)
			frames += int(o.Ne()[3])
			caches, err = readCaches(next)
			return err
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return out, frames, nil
}

// readCaches copies a chunk's caches out of its graph.
func readCaches(ts []native.Tensor) ([]wanCache, error) {
	out := make([]wanCache, len(ts))
	for i, t := range ts {
		if !t.Valid() {
			continue
		}
		v, err := t.F32()
		if err != nil {
			return nil, err
		}
		out[i] = wanCache{ne: t.Ne(), data: v}
	}
	return out, nil
}

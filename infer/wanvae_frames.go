package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// decodeWanVideo decodes a diffusion latent video [Z, frames, h, w] with a
// Wan VAE, one graph per latent frame as sd.cpp chunks it: frame 0 alone
// gives one frame, each later one four, and the causal convolutions'
// caches carry over between graphs in Go memory, so that a graph holds one
// chunk's activations. It returns the frames [n][3][H][W] and n.
func decodeWanVideo(m *Model, latent []float32, w, h, frames int) ([]float32, int, error) {
	c := &m.Config.VAE
	cfg := c.Layout.(*WanVAEConfig)
	cell := w * h
	if frames <= 0 || len(latent) != c.ZChannels*frames*cell {
		return nil, 0, fmt.Errorf("%s: %d latent values are not %d frames of %dx%dx%d", m.Path, len(latent), frames, c.ZChannels, h, w)
	}
	var caches []wanCache
	var out []float32
	n := 0
	z := make([]float32, c.ZChannels*cell)
	for f := range frames {
		for ch := range c.ZChannels {
			src := latent[(ch*frames+f)*cell : (ch*frames+f+1)*cell]
			for i, v := range src {
				z[ch*cell+i] = v/c.ScaleFactor + c.ShiftFactor
			}
		}
		var next []native.Tensor
		err := m.compute(func(g *builder) ([]input, native.Tensor) {
			r := &wanRun{g: g, cfg: cfg, chunk: f, prev: caches}
			zt := newInput(g, formats.F32, int64(w), int64(h), int64(c.ZChannels), 1)
			px := r.decode(zt)
			for _, t := range r.next {
				if t.Valid() {
					g.output(t)
				}
			}
			next = r.next
			return []input{{t: zt, f32: z}}, px
		}, func(o native.Tensor) error {
			v, err := o.F32()
			if err != nil {
				return err
			}
			out = append(out, v...)
			n += int(o.Ne()[3])
			caches, err = readCaches(next)
			return err
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return out, n, nil
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

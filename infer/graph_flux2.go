package infer

import (
	"github.com/sdtool/sdtool/native"
)

// The Flux.2 DiT on ggml: Flux.1's trunk (fluxTrunk) with the modulations
// of the three shared layers, computed once from the time (and, for dev,
// guidance) embedding, as sd.cpp's flux.hpp runs it with share_modulation.

// flux2RoPE returns the rotary embedding's cos and sin [d/2, Lt+Li] for
// txtTokens text tokens at positions (0, 0, 0, i) followed by a rows×cols
// grid of image tokens at (0, row, col, 0), as sd.cpp's gen_flux_ids does
// for Flux.2 (txt_arange_dims {3}).
func flux2RoPE(axes []int, theta float32, txtTokens, rows, cols int) (cos, sin []float32) {
	return axesRoPE(axes, theta, txtTokens+rows*cols, func(t int, pos []float32) {
		if t < txtTokens {
			pos[3] = float32(t)
			return
		}
		i := t - txtTokens
		pos[1], pos[2] = float32(i/cols), float32(i%cols)
	})
}

// flux2 builds one evaluation of the DiT: img [InChannels, Li] image
// tokens, txt [ContextDim, Lt] text tokens, t and guidance [1] (scaled by
// 1000 inside; guidance only read by dev), cos and sin [d/2, Lt+Li]. It
// returns the velocity tokens [OutChannels, Li] and, with capture, every
// block's output.
func (g *builder) flux2(cfg *Flux2Config, img, txt, t, guidance, cos, sin native.Tensor, capture bool) (native.Tensor, []blockTensor) {
	p := dmPrefix
	var blocks []blockTensor
	x := g.linear(img, p+"img_in")
	vec := g.fluxMLPEmbed(g.c.TimestepEmbedding(g.c.Scale(t, 1000), 256, 10000), p+"time_in")
	if cfg.Guidance {
		vec = g.c.Add(vec, g.fluxMLPEmbed(g.c.TimestepEmbedding(g.c.Scale(guidance, 1000), 256, 10000), p+"guidance_in"))
	}
	vec = g.c.Reshape(vec, int64(cfg.Hidden))
	mods := make([][]native.Tensor, len(flux2Mods))
	for i, m := range flux2Mods {
		mods[i] = g.fluxMod(vec, p+m.name, m.chunks)
	}
	shared := fluxBlockMods{
		double: func(int, string) ([]native.Tensor, []native.Tensor) { return mods[0], mods[1] },
		single: func(int, string) []native.Tensor { return mods[2] },
	}
	x = g.fluxTrunk(&cfg.FluxConfig, x, g.linear(txt, p+"txt_in"), shared, cos, sin, native.Tensor{}, g.fluxKeeper(capture, &blocks))
	mod := g.fluxMod(vec, p+"final_layer.adaLN_modulation.1", 2)
	return g.fluxFinal(x, mod[0], mod[1]), blocks
}

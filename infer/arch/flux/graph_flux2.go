package flux

import (
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// The Flux.2 DiT on ggml: Flux.1's trunk (fluxTrunk) with the modulations
// of the three shared layers, computed once from the time (and, for dev,
// guidance) embedding, as sd.cpp's flux.hpp runs it with share_modulation.

// flux2RefIndexStep is the first position axis's step between reference
// images: sd.cpp's ref_index_scale of 10 for Flux.2, so reference k
// (from 1) sits at index 10·k.
const flux2RefIndexStep = 10

// flux2RoPE returns the rotary embedding's cos and sin [d/2, Lt+Li+Lr] for
// txtTokens text tokens at positions (0, 0, 0, i), a rows×cols grid of
// image tokens at (0, row, col, 0), then the grids of the reference
// images (refs: rows and columns of each) at (10·k, row, col, 0), as
// sd.cpp's gen_flux_ids does for Flux.2 (txt_arange_dims {3}, references
// in its increasing index mode, each grid from row and column 0).
func flux2RoPE(axes []int, theta float32, txtTokens, rows, cols int, refs [][2]int) (cos, sin []float32) {
	type grid struct{ start, index, cols int }
	grids := []grid{{txtTokens, 0, cols}}
	l := txtTokens + rows*cols
	for k, r := range refs {
		grids = append(grids, grid{l, flux2RefIndexStep * (k + 1), r[1]})
		l += r[0] * r[1]
	}
	return axesRoPE(axes, theta, l, func(t int, pos []float32) {
		if t < txtTokens {
			pos[3] = float32(t)
			return
		}
		gr := grids[0]
		for _, g := range grids[1:] {
			if t >= g.start {
				gr = g
			}
		}
		i := t - gr.start
		pos[0], pos[1], pos[2] = float32(gr.index), float32(i/gr.cols), float32(i%gr.cols)
	})
}

// flux2 builds one evaluation of the DiT: img [InChannels, Li] image
// tokens, txt [ContextDim, Lt] text tokens, t and guidance [1] (scaled by
// 1000 inside; guidance only read by dev), cos and sin [d/2, Lt+Li]. It
// returns the velocity tokens [OutChannels, Li] and, with capture, every
// block's output.
func flux2(g *infer.Builder, cfg *Flux2Config, img, txt, t, guidance, cos, sin native.Tensor, capture bool) (native.Tensor, []infer.BlockTensor) {
	p := infer.DmPrefix
	var blocks []infer.BlockTensor
	x := g.Linear(img, p+"img_in")
	vec := fluxMLPEmbed(g, g.Ctx.TimestepEmbedding(g.Ctx.Scale(t, 1000), 256, 10000), p+"time_in")
	if cfg.Guidance {
		vec = g.Ctx.Add(vec, fluxMLPEmbed(g, g.Ctx.TimestepEmbedding(g.Ctx.Scale(guidance, 1000), 256, 10000), p+"guidance_in"))
	}
	vec = g.Ctx.Reshape(vec, int64(cfg.Hidden))
	mods := make([][]native.Tensor, len(flux2Mods))
	for i, m := range flux2Mods {
		mods[i] = FluxMod(g, vec, p+m.name, m.chunks)
	}
	shared := fluxBlockMods{
		double: func(int, string) ([]native.Tensor, []native.Tensor) { return mods[0], mods[1] },
		single: func(int, string) []native.Tensor { return mods[2] },
	}
	x = fluxTrunk(g, &cfg.FluxConfig, x, g.Linear(txt, p+"txt_in"), shared, cos, sin, native.Tensor{}, FluxKeeper(g, capture, &blocks))
	mod := FluxMod(g, vec, p+"final_layer.adaLN_modulation.1", 2)
	return FluxFinal(g, x, mod[0], mod[1]), blocks
}

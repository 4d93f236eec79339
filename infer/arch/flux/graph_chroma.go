package flux

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// Chroma's DiT on ggml: Flux.1's blocks (graph_flux.go) whose modulations
// come from the approximator, a residual MLP that maps each of
// chromaModRows rows (the time, the guidance and the row's index, each
// sinusoidally embedded) to one [h] vector, as sd.cpp's flux.hpp computes
// it; the text tokens' padding is masked out of every attention.

// chromaApprox is the approximator over rows x [64, n]: in_proj, then
// ApproxLayers residual MLPs (x + MLP(RMSNorm(x))), then out_proj; it
// returns [h, n].
func chromaApprox(g *infer.Builder, cfg *ChromaConfig, x native.Tensor) native.Tensor {
	p := chromaApproxPrefix
	x = g.Linear(x, p+"in_proj")
	for i := 0; i < cfg.ApproxLayers; i++ {
		n := g.Ctx.Mul(g.Ctx.RMSNorm(x, FluxNormEps), g.Weight(fmt.Sprintf("%snorms.%d.scale", p, i)))
		x = g.Ctx.Add(x, fluxMLPEmbed(g, n, fmt.Sprintf("%slayers.%d", p, i)))
	}
	return g.Linear(x, p+"out_proj")
}

// chromaApproxInput embeds the approximator's rows: ts and gs [n] hold
// the time and the guidance repeated, idx [n] the rows' indices; each row
// is [time (16), guidance (16), index (32)], every number scaled by 1000
// and embedded as Flux embeds its time.
func chromaApproxInput(g *infer.Builder, ts, gs, idx native.Tensor) native.Tensor {
	emb := func(x native.Tensor, dim int) native.Tensor {
		return g.Ctx.TimestepEmbedding(g.Ctx.Scale(x, 1000), dim, 10000)
	}
	return g.Ctx.Concat(g.Ctx.Concat(emb(ts, 16), emb(gs, 16), 0), emb(idx, 32), 0)
}

// chromaRows views rows [from, from+n) of the modulations m [h, rows] as n [h] tensors.
func chromaRows(g *infer.Builder, m native.Tensor, from, n int) []native.Tensor {
	h, nb := m.Ne()[0], m.Nb()
	out := make([]native.Tensor, n)
	for i := range out {
		out[i] = g.Ctx.View(m, [4]int64{h, 1, 1, 1}, nb[1], nb[1], nb[1], int64(from+i)*nb[1])
	}
	return out
}

// chroma builds one evaluation of the DiT: img [InChannels, Li] patch
// tokens, txt [ContextDim, Lt] text tokens, ts, gs and idx the
// approximator's inputs (chromaApproxInput), mask [Lt+Li] the key mask (0
// or -inf; invalid for none), cos and sin the rotary embedding. It returns
// the velocity tokens [OutChannels, Li] and, with capture, every block's
// output.
func chroma(g *infer.Builder, cfg *ChromaConfig, img, txt, ts, gs, idx, mask, cos, sin native.Tensor, capture bool) (native.Tensor, []infer.BlockTensor) {
	var blocks []infer.BlockTensor
	m := chromaApprox(g, cfg, chromaApproxInput(g, ts, gs, idx)) // [h, chromaModRows]
	mods := fluxBlockMods{
		double: func(i int, _ string) ([]native.Tensor, []native.Tensor) {
			img := 3*chromaSingleRows + 6*i
			return chromaRows(g, m, img, 6), chromaRows(g, m, img+6*chromaDoubleRows, 6)
		},
		single: func(i int, _ string) []native.Tensor { return chromaRows(g, m, 3*i, 3) },
	}
	x := g.Linear(img, infer.DmPrefix+"img_in")
	x = fluxTrunk(g, &cfg.FluxConfig, x, g.Linear(txt, infer.DmPrefix+"txt_in"), mods, cos, sin, mask, FluxKeeper(g, capture, &blocks))
	final := chromaRows(g, m, chromaModRows-2, 2)
	return FluxFinal(g, x, final[0], final[1]), blocks
}

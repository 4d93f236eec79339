package infer

import (
	"fmt"

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
func (g *builder) chromaApprox(cfg *ChromaConfig, x native.Tensor) native.Tensor {
	p := chromaApproxPrefix
	x = g.linear(x, p+"in_proj")
	for i := 0; i < cfg.ApproxLayers; i++ {
		n := g.c.Mul(g.c.RMSNorm(x, fluxNormEps), g.weight(fmt.Sprintf("%snorms.%d.scale", p, i)))
		x = g.c.Add(x, g.fluxMLPEmbed(n, fmt.Sprintf("%slayers.%d", p, i)))
	}
	return g.linear(x, p+"out_proj")
}

// chromaApproxInput embeds the approximator's rows: ts and gs [n] hold
// the time and the guidance repeated, idx [n] the rows' indices; each row
// is [time (16), guidance (16), index (32)], every number scaled by 1000
// and embedded as Flux embeds its time.
func (g *builder) chromaApproxInput(ts, gs, idx native.Tensor) native.Tensor {
	emb := func(x native.Tensor, dim int) native.Tensor {
		return g.c.TimestepEmbedding(g.c.Scale(x, 1000), dim, 10000)
	}
	return g.c.Concat(g.c.Concat(emb(ts, 16), emb(gs, 16), 0), emb(idx, 32), 0)
}

// chromaRows views rows [from, from+n) of the modulations m [h, rows] as n [h] tensors.
func (g *builder) chromaRows(m native.Tensor, from, n int) []native.Tensor {
	h, nb := m.Ne()[0], m.Nb()
	out := make([]native.Tensor, n)
	for i := range out {
		out[i] = g.c.View(m, [4]int64{h, 1, 1, 1}, nb[1], nb[1], nb[1], int64(from+i)*nb[1])
	}
	return out
}

// chroma builds one evaluation of the DiT: img [InChannels, Li] patch
// tokens, txt [ContextDim, Lt] text tokens, ts, gs and idx the
// approximator's inputs (chromaApproxInput), mask [Lt+Li] the key mask (0
// or -inf; invalid for none), cos and sin the rotary embedding. It returns
// the velocity tokens [OutChannels, Li] and, with capture, every block's
// output.
func (g *builder) chroma(cfg *ChromaConfig, img, txt, ts, gs, idx, mask, cos, sin native.Tensor, capture bool) (native.Tensor, []blockTensor) {
	var blocks []blockTensor
	m := g.chromaApprox(cfg, g.chromaApproxInput(ts, gs, idx)) // [h, chromaModRows]
	mods := fluxBlockMods{
		double: func(i int, _ string) ([]native.Tensor, []native.Tensor) {
			img := 3*chromaSingleRows + 6*i
			return g.chromaRows(m, img, 6), g.chromaRows(m, img+6*chromaDoubleRows, 6)
		},
		single: func(i int, _ string) []native.Tensor { return g.chromaRows(m, 3*i, 3) },
	}
	x := g.linear(img, dmPrefix+"img_in")
	x = g.fluxTrunk(&cfg.FluxConfig, x, g.linear(txt, dmPrefix+"txt_in"), mods, cos, sin, mask, g.fluxKeeper(capture, &blocks))
	final := g.chromaRows(m, chromaModRows-2, 2)
	return g.fluxFinal(x, final[0], final[1]), blocks
}

package zimage

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/native"
)

// The Z-Image DiT on ggml (tokens are [C, L], heads [d, heads, L]), as
// sd.cpp's z_image.hpp computes it: text tokens (RMS-normed and projected)
// pass context refiner blocks, image patch tokens noise refiner blocks
// modulated by the time embedding, each stream padded to a multiple of 32
// tokens with its learned pad token; then the joined sequence passes the
// main layers and a final layer. Every block is pre- and post-normed
// (RMSNorm) around attention and a SwiGLU feed-forward, and modulated
// blocks scale the pre-norm by 1+scale and gate the post-norm by
// tanh(gate). RoPE covers three position axes: text tokens count up on the
// first axis from 1, image patches sit at one index past the text with
// their row and column, pad tokens at 0.

// zimageNormEps is the epsilon of the blocks' and the caption's RMS norms;
// the QK norms and the final layer norm use 1e-6 (fluxNormEps).
const zimageNormEps = 1e-5

// zimageSeqMultiple is the multiple each stream is padded to.
const zimageSeqMultiple = 32

// zimageW2Scale scales the feed-forward's w2 input down (and its output
// back up), as sd.cpp does to keep it finite in low-precision kernels.
const zimageW2Scale = 1.0 / 128

// zimagePad returns how many pad tokens bring n to a multiple of zimageSeqMultiple.
func zimagePad(n int) int { return (zimageSeqMultiple - n%zimageSeqMultiple) % zimageSeqMultiple }

// zimagePositions returns the RoPE position (three axes) of every token of
// the joined sequence: txt text tokens and their padding at (i+1, 0, 0),
// the rows×cols image patches at (T+1, row, col) with T the padded text
// length, then the image's padding at (0, 0, 0).
func zimagePositions(txt, rows, cols int) [][3]float32 {
	lt := txt + zimagePad(txt)
	li := rows * cols
	out := make([][3]float32, 0, lt+li+zimagePad(li))
	for i := 0; i < lt; i++ {
		out = append(out, [3]float32{float32(i + 1), 0, 0})
	}
	for i := 0; i < li; i++ {
		out = append(out, [3]float32{float32(lt + 1), float32(i / cols), float32(i % cols)})
	}
	for i := 0; i < zimagePad(li); i++ {
		out = append(out, [3]float32{})
	}
	return out
}

// zimageNorm is RMSNorm over ne0 with prefix's weight.
func zimageNorm(g *infer.Builder, x native.Tensor, prefix string, eps float32) native.Tensor {
	return g.Ctx.Mul(g.Ctx.RMSNorm(x, eps), g.Weight(prefix+".weight"))
}

// zimageLinearF32 is linear with the weight widened to F32 first (dequantized
// when quantized), as sd.cpp holds the weights of its force_f32 linears
// (the time embedder and the final projection): the activations then stay
// F32 instead of being rounded to the weight's dot-product type.
func zimageLinearF32(g *infer.Builder, x native.Tensor, prefix string) native.Tensor {
	w := g.Weight(prefix + ".weight")
	if _, ok := g.Weights.W8A8[prefix+".weight"]; ok || w.Type() == formats.F32 {
		return g.Linear(x, prefix)
	}
	y := g.Ctx.MulMat(g.Ctx.Cast(w, formats.F32), x)
	g.Watch(w, x)
	if g.Has(prefix + ".bias") {
		y = g.Ctx.Add(y, g.Weight(prefix+".bias"))
	}
	return y
}

// zimageAttention is a block's attention over x [h, L] with the RoPE table
// cos, sin [d/2, L].
func zimageAttention(g *infer.Builder, cfg *ZImageConfig, p string, x, cos, sin native.Tensor) native.Tensor {
	d, nh, nkv := int64(cfg.HeadDim), int64(cfg.Heads), int64(cfg.KVHeads)
	t := g.Linear(x, p+"attention.qkv")
	q := zimageNorm(g, flux.FluxHeads(g, t, d, nh, 0), p+"attention.q_norm", flux.FluxNormEps)
	k := zimageNorm(g, flux.FluxHeads(g, t, d, nkv, nh*d), p+"attention.k_norm", flux.FluxNormEps)
	v := flux.FluxHeads(g, t, d, nkv, (nh+nkv)*d)
	return g.Linear(flux.FluxAttention(g.Ctx, q, k, v, cos, sin), p+"attention.out")
}

// zimageFF is the SwiGLU feed-forward: w2(silu(w1·x)·(w3·x)), w2's input scaled by zimageW2Scale.
func zimageFF(g *infer.Builder, x native.Tensor, p string) native.Tensor {
	y := g.Ctx.SwiGLU(g.Linear(x, p+"feed_forward.w1"), g.Linear(x, p+"feed_forward.w3"))
	y = g.Linear(g.Ctx.Scale(y, zimageW2Scale), p+"feed_forward.w2")
	return g.Ctx.Scale(y, 1/zimageW2Scale)
}

// zimageBlock is one block (a refiner or a layer) over x [h, L]; temb, the
// time embedding, modulates it when valid (noise refiners and layers).
func zimageBlock(g *infer.Builder, cfg *ZImageConfig, p string, x, temb, cos, sin native.Tensor) native.Tensor {
	var mod []native.Tensor // scale_msa, gate_msa, scale_mlp, gate_mlp
	if temb.Valid() {
		mod = zimageMod(g, g.Linear(temb, p+"adaLN_modulation.0"), cfg.Hidden, 4)
	}
	sub := func(x native.Tensor, norm1, norm2 string, f func(native.Tensor) native.Tensor, scale, gate int) native.Tensor {
		y := zimageNorm(g, x, p+norm1, zimageNormEps)
		if mod != nil {
			y = g.Ctx.Add(y, g.Ctx.Mul(y, mod[scale]))
		}
		y = zimageNorm(g, f(y), p+norm2, zimageNormEps)
		if mod != nil {
			y = g.Ctx.Mul(y, g.Ctx.Tanh(mod[gate]))
		}
		return g.Ctx.Add(y, x)
	}
	x = sub(x, "attention_norm1", "attention_norm2", func(y native.Tensor) native.Tensor {
		return zimageAttention(g, cfg, p, y, cos, sin)
	}, 0, 1)
	return sub(x, "ffn_norm1", "ffn_norm2", func(y native.Tensor) native.Tensor { return zimageFF(g, y, p) }, 2, 3)
}

// zimageMod splits a modulation m [n·h] into its n chunks of h values.
func zimageMod(g *infer.Builder, m native.Tensor, h, n int) []native.Tensor {
	if m.Ne()[0] != int64(n*h) {
		panic(&native.ShapeError{Msg: fmt.Sprintf("z_image: modulation of %d values, want %d×%d", m.Ne()[0], n, h)})
	}
	nb := m.Nb()
	out := make([]native.Tensor, n)
	for i := range out {
		out[i] = g.Ctx.View(m, [4]int64{int64(h), 1, 1, 1}, nb[1], nb[1], nb[1], int64(i*h)*nb[0])
	}
	return out
}

// zimagePadded appends the learned pad token name to x [h, L] until L is a
// multiple of zimageSeqMultiple.
func zimagePadded(g *infer.Builder, x native.Tensor, name string) native.Tensor {
	ne := x.Ne()
	n := zimagePad(int(ne[1]))
	if n == 0 {
		return x
	}
	pad := g.Ctx.Reshape(g.Weight(name), ne[0], 1)
	return g.Ctx.Concat(x, g.Ctx.Repeat(pad, [4]int64{ne[0], int64(n), 1, 1}), 1)
}

// zimageRows views tokens [h, from:to) of x [h, L].
func zimageRows(g *infer.Builder, x native.Tensor, from, to int64) native.Tensor {
	ne, nb := x.Ne(), x.Nb()
	return g.Ctx.View(x, [4]int64{ne[0], to - from, 1, 1}, nb[1], nb[1]*(to-from), nb[1]*(to-from), from*nb[1])
}

// zimage builds one evaluation of the DiT: img [p²·C, Li] patch tokens,
// txt [CapDim, Lt] text tokens, t [1] the timestep (1000·(1-sigma)), cos
// and sin [d/2, L] the RoPE table of the padded joined sequence
// (zimagePositions). It returns the DiT's output for the Li image tokens,
// [p²·C, Li] (sd.cpp negates it afterwards), and, with capture, every
// block's output.
func zimage(g *infer.Builder, cfg *ZImageConfig, img, txt, t, cos, sin native.Tensor, capture bool) (native.Tensor, []infer.BlockTensor) {
	p := infer.DmPrefix
	var blocks []infer.BlockTensor
	keep := func(name string, x native.Tensor) {
		if capture {
			blocks = append(blocks, infer.BlockTensor{Name: name, T: g.Output(g.Ctx.Cont(x))})
		}
	}
	li := img.Ne()[1]
	temb := g.Ctx.TimestepEmbedding(t, 256, 10000)
	temb = zimageLinearF32(g, g.Ctx.SiLU(zimageLinearF32(g, temb, p+"t_embedder.mlp.0")), p+"t_embedder.mlp.2")
	temb = g.Ctx.Reshape(temb, int64(cfg.TimeDim))
	x := zimagePadded(g, g.Linear(img, p+"x_embedder"), p+"x_pad_token")
	c := g.Linear(zimageNorm(g, txt, p+"cap_embedder.0", zimageNormEps), p+"cap_embedder.1")
	c = zimagePadded(g, c, p+"cap_pad_token")
	lt, lx := c.Ne()[1], x.Ne()[1]
	tcos, tsin := zimageRows(g, cos, 0, lt), zimageRows(g, sin, 0, lt)
	icos, isin := zimageRows(g, cos, lt, lt+lx), zimageRows(g, sin, lt, lt+lx)
	for i := 0; i < cfg.ContextRefiners; i++ {
		c = zimageBlock(g, cfg, fmt.Sprintf("%scontext_refiner.%d.", p, i), c, native.Tensor{}, tcos, tsin)
		keep(fmt.Sprintf("context_refiner.%d", i), c)
	}
	for i := 0; i < cfg.NoiseRefiners; i++ {
		x = zimageBlock(g, cfg, fmt.Sprintf("%snoise_refiner.%d.", p, i), x, temb, icos, isin)
		keep(fmt.Sprintf("noise_refiner.%d", i), x)
	}
	joint := g.Ctx.Concat(c, x, 1)
	for i := 0; i < cfg.Layers; i++ {
		joint = zimageBlock(g, cfg, fmt.Sprintf("%slayers.%d.", p, i), joint, temb, cos, sin)
		keep(fmt.Sprintf("layers.%d", i), joint)
	}
	scale := g.Linear(g.Ctx.SiLU(temb), p+"final_layer.adaLN_modulation.1")
	y := g.Ctx.Norm(zimageRows(g, joint, lt, lt+li), flux.FluxNormEps)
	y = g.Ctx.Add(y, g.Ctx.Mul(y, scale))
	return zimageLinearF32(g, y, p+"final_layer.linear"), blocks
}

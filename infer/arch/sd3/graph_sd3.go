package sd3

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/native"
)

// The SD 3 / 3.5 MMDiT on ggml (tokens are [C, L]): joint blocks in which
// the text (context) and image (x) streams each modulate their own layer
// norm from the time/pooled-text vector and attend over both together
// with their own projections; 3.5 medium's first blocks add an image-only
// attention (attn2), 3.5 normalises queries and keys per head; learned
// positions cropped from a square table; as sd.cpp's mmdit.hpp computes it.

// sd3NormEps is the epsilon of the MMDiT's layer norms and QK norms.
const sd3NormEps = 1e-6

// sd3Mods applies prefix (adaLN_modulation.1) to SiLU(c) and returns its n chunks.
func sd3Mods(g *infer.Builder, c native.Tensor, prefix string, n int) []native.Tensor {
	return flux.FluxMod(g, c, prefix, n)
}

// sd3QKV is one attention's queries, keys and values over x [h, L] (q and
// k normed per head when the model has QK norms), each [h, L].
func sd3QKV(g *infer.Builder, cfg *SD3Config, x native.Tensor, prefix string) (q, k, v native.Tensor) {
	d, heads, h := int64(cfg.HeadDim), int64(cfg.Heads), int64(cfg.Hidden)
	t := g.Linear(x, prefix+".qkv")
	l := t.Ne()[1]
	part := func(i int64) native.Tensor { return g.Ctx.Cont(flux.FluxHeads(g, t, d, heads, i*h)) } // [d, heads, L]
	norm := func(x native.Tensor, name string) native.Tensor {
		switch cfg.QKNorm {
		case "rms":
			x = g.Ctx.Mul(g.Ctx.RMSNorm(x, sd3NormEps), g.Weight(prefix+"."+name+".weight"))
		case "ln":
			x = g.LayerNorm(x, prefix+"."+name, sd3NormEps)
		}
		return g.Ctx.Reshape(x, h, l)
	}
	return norm(part(0), "ln_q"), norm(part(1), "ln_k"), g.Ctx.Reshape(part(2), h, l)
}

// sd3Attention is attention over q, k, v [h, L] in cfg.Heads heads.
func sd3Attention(g *infer.Builder, cfg *SD3Config, q, k, v native.Tensor) native.Tensor {
	return infer.Attention(g.Ctx, q, k, v, cfg.Heads, false)
}

// sd3Post is a stream's update after attention: x + proj(attn)·gate,
// then x + MLP(modulated norm)·gate.
func sd3Post(g *infer.Builder, x, attn native.Tensor, mod []native.Tensor, p string) native.Tensor {
	x = g.Ctx.Add(x, g.Ctx.Mul(g.Linear(attn, p+"attn.proj"), mod[2]))
	y := flux.FluxModulate(g, g.Ctx.Norm(x, sd3NormEps), mod[3], mod[4])
	y = g.Linear(g.Ctx.GELU(g.Linear(y, p+"mlp.fc1")), p+"mlp.fc2")
	return g.Ctx.Add(x, g.Ctx.Mul(y, mod[5]))
}

// sd3Joint is joint_blocks.i over context [h, Lc] and x [h, Lx] (context
// first in the joint attention); the last block returns no context.
func sd3Joint(g *infer.Builder, cfg *SD3Config, i int, ctx, x, c native.Tensor) (native.Tensor, native.Tensor) {
	p := fmt.Sprintf("%sjoint_blocks.%d.", infer.DmPrefix, i)
	cp, xp := p+"context_block.", p+"x_block."
	last, self := i == cfg.Depth-1, i < cfg.XSelf
	cn := 6
	if last {
		cn = 2
	}
	xn := 6
	if self {
		xn = 9
	}
	cm, xm := sd3Mods(g, c, cp+"adaLN_modulation.1", cn), sd3Mods(g, c, xp+"adaLN_modulation.1", xn)
	cq, ck, cv := sd3QKV(g, cfg, flux.FluxModulate(g, g.Ctx.Norm(ctx, sd3NormEps), cm[0], cm[1]), cp+"attn")
	xNorm := g.Ctx.Norm(x, sd3NormEps)
	xq, xk, xv := sd3QKV(g, cfg, flux.FluxModulate(g, xNorm, xm[0], xm[1]), xp+"attn")
	a := sd3Attention(g, cfg, g.Ctx.Concat(cq, xq, 1), g.Ctx.Concat(ck, xk, 1), g.Ctx.Concat(cv, xv, 1))
	h, lc, lx := int64(cfg.Hidden), ctx.Ne()[1], x.Ne()[1]
	nb := a.Nb()
	xa := g.Ctx.View(a, [4]int64{h, lx, 1, 1}, nb[1], nb[1]*lx, nb[1]*lx, lc*nb[1])
	if self {
		q2, k2, v2 := sd3QKV(g, cfg, flux.FluxModulate(g, xNorm, xm[6], xm[7]), xp+"attn2")
		x2 := g.Linear(sd3Attention(g, cfg, q2, k2, v2), xp+"attn2.proj")
		// sd.cpp adds attn2 after attn and before the MLP.
		x = g.Ctx.Add(x, g.Ctx.Mul(g.Linear(xa, xp+"attn.proj"), xm[2]))
		x = g.Ctx.Add(x, g.Ctx.Mul(x2, xm[8]))
		y := flux.FluxModulate(g, g.Ctx.Norm(x, sd3NormEps), xm[3], xm[4])
		y = g.Linear(g.Ctx.GELU(g.Linear(y, xp+"mlp.fc1")), xp+"mlp.fc2")
		x = g.Ctx.Add(x, g.Ctx.Mul(y, xm[5]))
	} else {
		x = sd3Post(g, x, xa, xm, xp)
	}
	if last {
		return native.Tensor{}, x
	}
	ca := g.Ctx.View(a, [4]int64{h, lc, 1, 1}, nb[1], nb[1]*lc, nb[1]*lc, 0)
	return sd3Post(g, ctx, ca, cm, cp), x
}

// sd3PosEmbed crops the learned positions to a rows×cols patch grid,
// centred in the square table as sd.cpp crops it: [h, rows·cols].
func sd3PosEmbed(g *infer.Builder, cfg *SD3Config, rows, cols int) native.Tensor {
	if rows > cfg.PosMax || cols > cfg.PosMax {
		panic(&native.ShapeError{Msg: fmt.Sprintf("mmdit: %dx%d patches, the position table holds %dx%d", rows, cols, cfg.PosMax, cfg.PosMax)})
	}
	h, m := int64(cfg.Hidden), int64(cfg.PosMax)
	pos := g.Ctx.Reshape(g.Weight(infer.DmPrefix+"pos_embed"), h, m, m)
	top, left := (m-int64(rows))/2, (m-int64(cols))/2
	nb := pos.Nb()
	crop := g.Ctx.View(pos, [4]int64{h, int64(cols), int64(rows), 1}, nb[1], nb[2], nb[2]*int64(rows), top*nb[2]+left*nb[1])
	return g.Ctx.Reshape(g.Ctx.Cont(crop), h, int64(rows*cols))
}

// sd3 builds one evaluation of the MMDiT: img [InChannels·p², L] patch
// tokens (patchify's layout, the patch kernel's), txt [ContextDim, Lc], t
// [1] the timestep (sigma·1000), y [ADMIn] the pooled text vector. It
// returns the output tokens [p²·OutChannels, L] (channel fastest) and,
// with capture, every block's image stream.
func sd3(g *infer.Builder, cfg *SD3Config, img, txt, t, y native.Tensor, rows, cols int, capture bool) (native.Tensor, []infer.BlockTensor) {
	p := infer.DmPrefix
	var blocks []infer.BlockTensor
	keep := flux.FluxKeeper(g, capture, &blocks)
	k := g.Weight(p + "x_embedder.proj.weight")
	kw := g.Ctx.Reshape(k, int64(cfg.InChannels*cfg.Patch*cfg.Patch), int64(cfg.Hidden))
	x := g.Ctx.MulMat(kw, img)
	if g.Has(p + "x_embedder.proj.bias") {
		x = g.Ctx.Add(x, g.Weight(p+"x_embedder.proj.bias"))
	}
	x = g.Ctx.Add(x, sd3PosEmbed(g, cfg, rows, cols))
	mlp := func(x native.Tensor, prefix string) native.Tensor {
		return g.Linear(g.Ctx.SiLU(g.Linear(x, prefix+".mlp.0")), prefix+".mlp.2")
	}
	c := mlp(g.Ctx.TimestepEmbedding(t, 256, 10000), p+"t_embedder")
	c = g.Ctx.Reshape(g.Ctx.Add(c, mlp(y, p+"y_embedder")), int64(cfg.Hidden))
	ctx := g.Linear(txt, p+"context_embedder")
	for i := 0; i < cfg.Depth; i++ {
		ctx, x = sd3Joint(g, cfg, i, ctx, x, c)
		keep(fmt.Sprintf("joint_blocks.%d", i), x)
	}
	mod := sd3Mods(g, c, p+"final_layer.adaLN_modulation.1", 2)
	return flux.FluxFinal(g, x, mod[0], mod[1]), blocks
}

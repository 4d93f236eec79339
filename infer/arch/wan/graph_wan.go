package wan

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/native"
)

// The Wan 2.1/2.2 video DiT on ggml (tokens are [C, L], L = frames·rows·
// cols patches, frame-major): a 3-D patch embedding, blocks of self-
// attention with a 3-D rotary embedding, cross-attention to the UMT5
// tokens and a feed-forward, each modulated by six vectors from the time
// embedding plus the block's own modulation table, and a modulated head,
// computed as sd.cpp's wan.hpp does.

// wanRoPE returns the rotary embedding's cos and sin [d/2, L] for a
// frames×rows×cols grid of patches at positions (frame, row, column): pair
// j of axis a (width axes[a]) turns by pos·theta^(-2j/axes[a]), in float32
// as sd.cpp computes it.
func wanRoPE(axes []int, theta float32, frames, rows, cols int) (cos, sin []float32) {
	var omega []float32
	var axisOf []int
	for ai, a := range axes {
		n := a / 2
		end := (float32(a) - 2) / float32(a)
		step := float32(0)
		if n > 1 {
			step = end / float32(n-1)
		}
		for j := 0; j < n; j++ {
			omega = append(omega, 1/float32(math.Pow(float64(theta), float64(float32(j)*step))))
			axisOf = append(axisOf, ai)
		}
	}
	half := len(omega)
	l := frames * rows * cols
	cos, sin = make([]float32, l*half), make([]float32, l*half)
	for t := 0; t < l; t++ {
		pos := [3]float32{float32(t / (rows * cols)), float32(t / cols % rows), float32(t % cols)}
		for k := 0; k < half; k++ {
			angle := pos[axisOf[k]] * omega[k]
			cos[t*half+k] = float32(math.Cos(float64(angle)))
			sin[t*half+k] = float32(math.Sin(float64(angle)))
		}
	}
	return cos, sin
}

// wanChunks views m [h, n, T] as its n columns [h, 1, T] (the
// modulation's shift, scale, gate, ... for each of T latent frames, or
// for all frames when T is 1).
func wanChunks(g *infer.Builder, m native.Tensor, n int) []native.Tensor {
	ne, nb := m.Ne(), m.Nb()
	if ne[1] != int64(n) {
		panic(&native.ShapeError{Msg: fmt.Sprintf("wan: modulation of %d vectors, want %d", ne[1], n)})
	}
	out := make([]native.Tensor, n)
	for i := range out {
		out[i] = g.Ctx.View(m, [4]int64{ne[0], 1, ne[2], 1}, nb[1], nb[2], nb[2]*ne[2], int64(i)*nb[1])
	}
	return out
}

// wanPerFrame applies op to tokens x [h, L] and a modulation vector e
// [h, 1, T]: with T latent frames (T > 1, the per-frame timesteps of
// image-to-video) the frame-major tokens are viewed as [h, L/T, T] so that
// each frame takes its own vector, as wan.hpp's modulate_add and
// modulate_mul do.
func wanPerFrame(g *infer.Builder, x, e native.Tensor, op func(a, b native.Tensor) native.Tensor) native.Tensor {
	t := e.Ne()[2]
	if t == 1 {
		return op(x, e)
	}
	ne := x.Ne()
	if ne[1]%t != 0 {
		panic(&native.ShapeError{Msg: fmt.Sprintf("wan: %d tokens in %d frames", ne[1], t)})
	}
	return g.Ctx.Reshape(op(g.Ctx.Reshape(x, ne[0], ne[1]/t, t), e), ne[0], ne[1])
}

// wanRMS is an RMS norm over the whole width with prefix's scale.
func wanRMS(g *infer.Builder, x native.Tensor, prefix string) native.Tensor {
	return g.Ctx.Mul(g.Ctx.RMSNorm(x, wanEps), g.Weight(prefix+".weight"))
}

// wanSelfAttn is a block's self-attention over the patch tokens y [h, L].
func wanSelfAttn(g *infer.Builder, cfg *WanConfig, p string, y, cos, sin native.Tensor) native.Tensor {
	d, heads, l := int64(cfg.HeadDim), int64(cfg.Heads), y.Ne()[1]
	q := wanRMS(g, g.Linear(y, p+"q"), p+"norm_q")
	k := wanRMS(g, g.Linear(y, p+"k"), p+"norm_k")
	v := g.Linear(y, p+"v")
	a := flux.FluxAttention(g.Ctx, g.Ctx.Reshape(q, d, heads, l), g.Ctx.Reshape(k, d, heads, l), g.Ctx.Reshape(v, d, heads, l), cos, sin)
	return g.Linear(a, p+"o")
}

// wanCrossAttn is a block's cross-attention from x [h, L] to the embedded text tokens ctx [h, Lc].
func wanCrossAttn(g *infer.Builder, cfg *WanConfig, p string, x, ctx native.Tensor) native.Tensor {
	q := wanRMS(g, g.Linear(x, p+"q"), p+"norm_q")
	k := wanRMS(g, g.Linear(ctx, p+"k"), p+"norm_k")
	v := g.Linear(ctx, p+"v")
	return g.Linear(infer.Attention(g.Ctx, q, k, v, cfg.Heads, false), p+"o")
}

// wanBlock is blocks.i: x [h, L], e0 [h, 6] the projected time embedding,
// ctx [h, Lc] the embedded text tokens.
func wanBlock(g *infer.Builder, cfg *WanConfig, p string, x, e0, ctx, cos, sin native.Tensor) native.Tensor {
	es := wanChunks(g, g.Ctx.Add(e0, g.Ctx.Reshape(g.Weight(p+"modulation"), int64(cfg.Hidden), 6)), 6)
	y := wanModNorm(g, x, es[0], es[1])
	x = g.Ctx.Add(x, wanPerFrame(g, wanSelfAttn(g, cfg, p+"self_attn.", y, cos, sin), es[2], g.Ctx.Mul))
	n3 := x
	if cfg.CrossNorm {
		n3 = g.LayerNorm(x, p+"norm3", wanEps)
	}
	x = g.Ctx.Add(x, wanCrossAttn(g, cfg, p+"cross_attn.", n3, ctx))
	y = wanModNorm(g, x, es[3], es[4])
	y = g.Linear(g.Ctx.GELU(g.Linear(y, p+"ffn.0")), p+"ffn.2")
	return g.Ctx.Add(x, wanPerFrame(g, y, es[5], g.Ctx.Mul))
}

// wanModNorm is the affine-free layer norm of x modulated by shift and
// scale (y + y·scale + shift, frame by frame when they are per frame).
func wanModNorm(g *infer.Builder, x, shift, scale native.Tensor) native.Tensor {
	y := g.Ctx.Norm(x, wanEps)
	return wanPerFrame(g, g.Ctx.Add(y, wanPerFrame(g, y, scale, g.Ctx.Mul)), shift, g.Ctx.Add)
}

// wan builds one evaluation of the DiT: img [C·ph·pw, L] patch tokens
// (feature c·ph·pw + row·pw + col, tokens frame-major), txt [TextDim, Lc]
// the UMT5 tokens, t [1] the timestep (sigma·1000) or [T] one per latent
// frame (image-to-video: tokens of frame f take t[f]), cos and sin [d/2, L]
// the rotary embedding. It returns the head's tokens [ph·pw·C, L] (feature
// (row·pw + col)·C + c) and, with capture, every block's output.
func wan(g *infer.Builder, cfg *WanConfig, img, txt, t, cos, sin native.Tensor, capture bool) (native.Tensor, []infer.BlockTensor) {
	p := cfg.Prefix
	h := int64(cfg.Hidden)
	var blocks []infer.BlockTensor
	pw := g.Weight(p + "patch_embedding.weight")
	ne := pw.Ne()
	x := g.Ctx.MulMat(g.Ctx.Reshape(pw, ne[0]*ne[1]*ne[2]*ne[3]/h, h), img)
	if g.Has(p + "patch_embedding.bias") {
		x = g.Ctx.Add(x, g.Weight(p+"patch_embedding.bias"))
	}
	e := g.Linear(g.Ctx.SiLU(g.Linear(g.Ctx.TimestepEmbedding(t, cfg.FreqDim, 10000), p+"time_embedding.0")), p+"time_embedding.2")
	nt := t.Ne()[0]
	e0 := g.Ctx.Reshape(g.Linear(g.Ctx.SiLU(e), p+"time_projection.1"), h, 6, nt)
	ctx := g.Linear(g.Ctx.GELU(g.Linear(txt, p+"text_embedding.0")), p+"text_embedding.2")
	for i := 0; i < cfg.Blocks; i++ {
		x = wanBlock(g, cfg, fmt.Sprintf("%sblocks.%d.", p, i), x, e0, ctx, cos, sin)
		if capture {
			blocks = append(blocks, infer.BlockTensor{Name: fmt.Sprintf("blocks.%d", i), T: g.Output(g.Ctx.Cont(x))})
		}
	}
	e = g.Ctx.Repeat(g.Ctx.Reshape(e, h, 1, nt), [4]int64{h, 2, nt, 1})
	es := wanChunks(g, g.Ctx.Add(e, g.Ctx.Reshape(g.Weight(p+"head.modulation"), h, 2)), 2)
	x = wanModNorm(g, x, es[0], es[1])
	return g.Linear(x, p+"head.head"), blocks
}

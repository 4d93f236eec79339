package flux

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// The Flux.1 MMDiT on ggml (tokens are [C, L], heads [d, heads, L]): double-
// stream blocks that attend over text and image tokens together with
// separate weights per stream, single-stream blocks over the joined
// sequence, adaLN modulation from the time/guidance/pooled-text vector,
// RMS-normed queries and keys, and a rotary embedding over three position
// axes (index, row, column), computed as sd.cpp's flux.hpp and rope.hpp do.

// FluxNormEps is the epsilon of Flux's layer norms and QK RMS norms.
const FluxNormEps = 1e-6

// fluxRoPE returns the rotary embedding's cos and sin [d/2, L] for
// txtTokens text tokens (all at position 0) followed by a rows×cols grid of
// image patches (position (0, row, col)): pair j of axis a (width axes[a])
// turns by pos·theta^(-2j/axes[a]), in float32 as sd.cpp computes it.
func fluxRoPE(axes []int, theta float32, txtTokens, rows, cols int) (cos, sin []float32) {
	return axesRoPE(axes, theta, txtTokens+rows*cols, func(t int, pos []float32) {
		if t >= txtTokens {
			i := t - txtTokens
			pos[1], pos[2] = float32(i/cols), float32(i%cols)
		}
	})
}

// axesRoPE returns the rotary embedding's cos and sin [d/2, l] of l tokens
// whose positions (one per axis, zero unless set) set gives: pair j of
// axis a (width axes[a]) turns by pos[a]·theta^(-2j/axes[a]), in float32
// as sd.cpp's rope.hpp computes it.
func axesRoPE(axes []int, theta float32, l int, set func(t int, pos []float32)) (cos, sin []float32) {
	half := 0
	for _, a := range axes {
		half += a / 2
	}
	// omega[k] for every pair k of the head, axis by axis.
	omega := make([]float32, 0, half)
	axisOf := make([]int, 0, half)
	for ai, a := range axes {
		n := a / 2
		end := (float32(a) - 2) / float32(a)
		step := float32(0)
		if n > 1 {
			step = end / float32(n-1)
		}
		for j := 0; j < n; j++ {
			scale := float32(j) * step
			omega = append(omega, 1/float32(math.Pow(float64(theta), float64(scale))))
			axisOf = append(axisOf, ai)
		}
	}
	cos, sin = make([]float32, l*half), make([]float32, l*half)
	pos := make([]float32, len(axes))
	for t := 0; t < l; t++ {
		clear(pos)
		set(t, pos)
		for k := 0; k < half; k++ {
			angle := pos[axisOf[k]] * omega[k]
			cos[t*half+k] = float32(math.Cos(float64(angle)))
			sin[t*half+k] = float32(math.Sin(float64(angle)))
		}
	}
	return cos, sin
}

// RoPETable returns the rotary embedding's cos and sin [d/2, len(pos)] of
// tokens at the positions pos (one per axis): axesRoPE with the positions
// given as a table (Qwen-Image's and Z-Image's tokens).
func RoPETable(axes []int, theta float32, pos [][3]float32) (cos, sin []float32) {
	return axesRoPE(axes, theta, len(pos), func(t int, p []float32) { copy(p, pos[t][:]) })
}

// fluxMLPEmbed is Flux's MLPEmbedder: in_layer, SiLU, out_layer.
func fluxMLPEmbed(g *infer.Builder, x native.Tensor, prefix string) native.Tensor {
	return g.Linear(g.Ctx.SiLU(g.Linear(x, prefix+".in_layer")), prefix+".out_layer")
}

// FluxMod applies the modulation linear prefix to SiLU(vec) [h] and returns
// its n chunks of h values (shift, scale, gate, ... in order).
func FluxMod(g *infer.Builder, vec native.Tensor, prefix string, n int) []native.Tensor {
	m := g.Linear(g.Ctx.SiLU(vec), prefix)
	h := vec.Ne()[0]
	if m.Ne()[0] != int64(n)*h {
		panic(&native.ShapeError{Msg: fmt.Sprintf("flux: %s gives %d values, want %d×%d", prefix, m.Ne()[0], n, h)})
	}
	nb := m.Nb()
	out := make([]native.Tensor, n)
	for i := range out {
		out[i] = g.Ctx.View(m, [4]int64{h, 1, 1, 1}, nb[1], nb[1], nb[1], int64(i)*h*nb[0])
	}
	return out
}

// FluxModulate is x·(1+scale)+shift, summed in sd.cpp's order (x + x·scale, then + shift).
func FluxModulate(g *infer.Builder, x, shift, scale native.Tensor) native.Tensor {
	return g.Ctx.Add(g.Ctx.Add(x, g.Ctx.Mul(x, scale)), shift)
}

// FluxHeads views h-wide tokens t [≥off+h, L] at element offset off as heads [d, h/d, L].
func FluxHeads(g *infer.Builder, t native.Tensor, d, heads int64, off int64) native.Tensor {
	ne, nb := t.Ne(), t.Nb()
	return g.Ctx.View(t, [4]int64{d, heads, ne[1], 1}, d*nb[0], nb[1], nb[1]*ne[1], off*nb[0])
}

// fluxQKNorm is the QK RMS norm with its scale: x [d, heads, L].
func fluxQKNorm(g *infer.Builder, x native.Tensor, prefix string) native.Tensor {
	return g.Ctx.Mul(g.Ctx.RMSNorm(x, FluxNormEps), g.Weight(prefix+".scale"))
}

// FluxRotate applies the rotary embedding to x [d, heads, L] (contiguous):
// each adjacent pair (x0, x1) of a head becomes (x0·cos - x1·sin, x0·sin +
// x1·cos); cos and sin are [d/2, L]. It returns [d, L, heads], ready for
// the attention products.
func FluxRotate(c *native.Context, x, cos, sin native.Tensor) native.Tensor {
	ne := x.Ne()
	d, heads, l := ne[0], ne[1], ne[2]
	// [2, d/2, heads, L] -> [d/2, L, heads, 2]: the pair's halves become planes.
	p := c.Cont(c.Permute(c.Reshape(x, 2, d/2, heads, l), 3, 0, 2, 1))
	nb := p.Nb()
	plane := [4]int64{d / 2, l, heads, 1}
	x0 := c.View(p, plane, nb[1], nb[2], nb[3], 0)
	x1 := c.View(p, plane, nb[1], nb[2], nb[3], nb[3])
	cs, sn := c.Reshape(cos, d/2, l, 1, 1), c.Reshape(sin, d/2, l, 1, 1)
	o0 := c.Sub(c.Mul(x0, cs), c.Mul(x1, sn))
	o1 := c.Add(c.Mul(x0, sn), c.Mul(x1, cs))
	o := c.Concat(c.Reshape(o0, 1, d/2, l, heads), c.Reshape(o1, 1, d/2, l, heads), 0)
	return c.Reshape(o, d, l, heads)
}

// FluxAttention is RoPE attention over q, k, v [d, heads, L] (q and k
// normed): softmax(q·kᵀ/√d)·v per head, returned as tokens [heads·d, L].
func FluxAttention(c *native.Context, q, k, v, cos, sin native.Tensor) native.Tensor {
	return fluxAttentionMasked(c, q, k, v, cos, sin, native.Tensor{})
}

// fluxAttentionMasked is fluxAttention with an additive key mask [L] (0 or
// -inf per key, the same for every query; Chroma's padding mask) when
// mask is valid. Adding the mask before the softmax's scale gives sd.cpp's
// kq·scale + mask exactly, since the mask's entries are 0 or -inf.
func fluxAttentionMasked(c *native.Context, q, k, v, cos, sin, mask native.Tensor) native.Tensor {
	ne := q.Ne()
	d, heads, l := ne[0], ne[1], ne[2]
	qr := FluxRotate(c, q, cos, sin)       // [d, L, heads]
	kr := FluxRotate(c, k, cos, sin)       // [d, L, heads]
	vt := c.Cont(c.Permute(v, 1, 2, 0, 3)) // [L, d, heads]
	kq := c.MulMat(kr, qr)                 // [Lk, Lq, heads]
	if mask.Valid() {
		kq = c.Add(kq, mask)
	}
	kq = c.SoftMax(kq, float32(1/math.Sqrt(float64(d))))
	o := c.MulMat(vt, kq)                // [d, Lq, heads]
	o = c.Cont(c.Permute(o, 0, 2, 1, 3)) // [d, heads, Lq]
	return c.Reshape(o, d*heads, l)
}

// fluxMLP is a block's feed-forward: prefix.0, the activation (fluxAct), prefix.2.
func fluxMLP(g *infer.Builder, cfg *FluxConfig, x native.Tensor, prefix string) native.Tensor {
	return g.Linear(fluxAct(g, cfg, g.Linear(x, prefix+".0")), prefix+".2")
}

// fluxAct is the MLP activation over x [w, L]: GELU (tanh), or with
// GatedMLP SiLU of the first half of each token times its second half.
func fluxAct(g *infer.Builder, cfg *FluxConfig, x native.Tensor) native.Tensor {
	if !cfg.GatedMLP {
		return g.Ctx.GELU(x)
	}
	ne, nb := x.Ne(), x.Nb()
	half := [4]int64{ne[0] / 2, ne[1], 1, 1}
	gate := g.Ctx.Cont(g.Ctx.View(x, half, nb[1], nb[1]*ne[1], nb[1]*ne[1], 0))
	val := g.Ctx.Cont(g.Ctx.View(x, half, nb[1], nb[1]*ne[1], nb[1]*ne[1], half[0]*nb[0]))
	return g.Ctx.Mul(val, g.Ctx.SiLU(gate))
}

// fluxDouble is double_blocks.i: img [h, Li] and txt [h, Lt] attend
// jointly (text first), given the block's modulations (six [h] chunks per
// stream: shift, scale, gate for attention, then for the MLP; Flux's come
// from the block's own layers, Chroma's from its approximator) and an
// optional key mask (fluxAttentionMasked).
func fluxDouble(g *infer.Builder, cfg *FluxConfig, p string, img, txt native.Tensor, im, tm []native.Tensor, cos, sin, mask native.Tensor) (native.Tensor, native.Tensor) {
	d, heads, h := int64(cfg.HeadDim), int64(cfg.Heads), int64(cfg.Hidden)
	qkv := func(x native.Tensor, mod []native.Tensor, st string) (q, k, v native.Tensor) {
		y := FluxModulate(g, g.Ctx.Norm(x, FluxNormEps), mod[0], mod[1])
		t := g.Linear(y, p+st+"_attn.qkv")
		q = fluxQKNorm(g, FluxHeads(g, t, d, heads, 0), p+st+"_attn.norm.query_norm")
		k = fluxQKNorm(g, FluxHeads(g, t, d, heads, h), p+st+"_attn.norm.key_norm")
		v = FluxHeads(g, t, d, heads, 2*h)
		return q, k, v
	}
	iq, ik, iv := qkv(img, im, "img")
	tq, tk, tv := qkv(txt, tm, "txt")
	a := fluxAttentionMasked(g.Ctx, g.Ctx.Concat(tq, iq, 2), g.Ctx.Concat(tk, ik, 2), g.Ctx.Concat(tv, iv, 2), cos, sin, mask)
	lt, li := txt.Ne()[1], img.Ne()[1]
	nb := a.Nb()
	ta := g.Ctx.View(a, [4]int64{h, lt, 1, 1}, nb[1], nb[1]*lt, nb[1]*lt, 0)
	ia := g.Ctx.View(a, [4]int64{h, li, 1, 1}, nb[1], nb[1]*li, nb[1]*li, lt*nb[1])
	stream := func(x, attn native.Tensor, mod []native.Tensor, st string) native.Tensor {
		x = g.Ctx.Add(x, g.Ctx.Mul(g.Linear(attn, p+st+"_attn.proj"), mod[2]))
		y := fluxMLP(g, cfg, FluxModulate(g, g.Ctx.Norm(x, FluxNormEps), mod[3], mod[4]), p+st+"_mlp")
		return g.Ctx.Add(x, g.Ctx.Mul(y, mod[5]))
	}
	return stream(img, ia, im, "img"), stream(txt, ta, tm, "txt")
}

// fluxSingle is single_blocks.i over the joined tokens x [h, L], given its
// modulation (shift, scale, gate) and an optional key mask, as fluxDouble.
func fluxSingle(g *infer.Builder, cfg *FluxConfig, p string, x native.Tensor, mod []native.Tensor, cos, sin, mask native.Tensor) native.Tensor {
	d, heads, h, mlp := int64(cfg.HeadDim), int64(cfg.Heads), int64(cfg.Hidden), int64(cfg.MLP)
	y := FluxModulate(g, g.Ctx.Norm(x, FluxNormEps), mod[0], mod[1])
	t := g.Linear(y, p+"linear1") // [3h + mlp (2·mlp gated), L]
	q := fluxQKNorm(g, FluxHeads(g, t, d, heads, 0), p+"norm.query_norm")
	k := fluxQKNorm(g, FluxHeads(g, t, d, heads, h), p+"norm.key_norm")
	v := FluxHeads(g, t, d, heads, 2*h)
	a := fluxAttentionMasked(g.Ctx, q, k, v, cos, sin, mask)
	ne, nb := t.Ne(), t.Nb()
	if cfg.GatedMLP {
		mlp *= 2
	}
	m := fluxAct(g, cfg, g.Ctx.Cont(g.Ctx.View(t, [4]int64{mlp, ne[1], 1, 1}, nb[1], nb[1]*ne[1], nb[1]*ne[1], 3*h*nb[0])))
	out := g.Linear(g.Ctx.Concat(a, m, 0), p+"linear2")
	return g.Ctx.Add(x, g.Ctx.Mul(out, mod[2]))
}

// fluxBlockMods gives a block's modulations: a double block's (by its
// index) for the image and the text stream, or a single block's.
type fluxBlockMods struct {
	double func(i int, prefix string) (img, txt []native.Tensor)
	single func(i int, prefix string) []native.Tensor
}

// fluxTrunk runs the double blocks over image tokens x [h, Li] and text
// tokens c [h, Lt], then the single blocks over both joined, and returns
// the image tokens [h, Li]; keep receives every block's output.
func fluxTrunk(g *infer.Builder, cfg *FluxConfig, x, c native.Tensor, mods fluxBlockMods, cos, sin, mask native.Tensor, keep func(string, native.Tensor)) native.Tensor {
	p := infer.DmPrefix
	for i := 0; i < cfg.Double; i++ {
		bp := fmt.Sprintf("%sdouble_blocks.%d.", p, i)
		im, tm := mods.double(i, bp)
		x, c = fluxDouble(g, cfg, bp, x, c, im, tm, cos, sin, mask)
		keep(fmt.Sprintf("double_blocks.%d", i), x)
	}
	lt, li := c.Ne()[1], x.Ne()[1]
	joint := g.Ctx.Concat(c, x, 1)
	for i := 0; i < cfg.Single; i++ {
		bp := fmt.Sprintf("%ssingle_blocks.%d.", p, i)
		joint = fluxSingle(g, cfg, bp, joint, mods.single(i, bp), cos, sin, mask)
		keep(fmt.Sprintf("single_blocks.%d", i), joint)
	}
	nb := joint.Nb()
	return g.Ctx.View(joint, [4]int64{int64(cfg.Hidden), li, 1, 1}, nb[1], nb[1]*li, nb[1]*li, lt*nb[1])
}

// FluxKeeper returns a keep function for fluxTrunk that collects the
// block outputs into blocks when capture is set.
func FluxKeeper(g *infer.Builder, capture bool, blocks *[]infer.BlockTensor) func(string, native.Tensor) {
	return func(name string, x native.Tensor) {
		if capture {
			*blocks = append(*blocks, infer.BlockTensor{Name: name, T: g.Output(g.Ctx.Cont(x))})
		}
	}
}

// flux builds one evaluation of the DiT: img [InChannels, Li] patch tokens,
// txt [ContextDim, Lt] text tokens, t and guidance [1] (the noise level and
// the distilled guidance, both scaled by 1000 inside), y [VecDim] the
// pooled text vector, cos and sin [d/2, Lt+Li] the rotary embedding. It
// returns the velocity tokens [OutChannels, Li] and, with capture, every
// block's output.
func flux(g *infer.Builder, cfg *FluxConfig, img, txt, t, guidance, y, cos, sin native.Tensor, capture bool) (native.Tensor, []infer.BlockTensor) {
	p := infer.DmPrefix
	var blocks []infer.BlockTensor
	x := g.Linear(img, p+"img_in")
	vec := fluxMLPEmbed(g, g.Ctx.TimestepEmbedding(g.Ctx.Scale(t, 1000), 256, 10000), p+"time_in")
	if cfg.Guidance {
		vec = g.Ctx.Add(vec, fluxMLPEmbed(g, g.Ctx.TimestepEmbedding(g.Ctx.Scale(guidance, 1000), 256, 10000), p+"guidance_in"))
	}
	if cfg.VecDim > 0 {
		vec = g.Ctx.Add(vec, fluxMLPEmbed(g, y, p+"vector_in"))
	}
	vec = g.Ctx.Reshape(vec, int64(cfg.Hidden))
	mods := fluxBlockMods{
		double: func(_ int, bp string) ([]native.Tensor, []native.Tensor) {
			return FluxMod(g, vec, bp+"img_mod.lin", 6), FluxMod(g, vec, bp+"txt_mod.lin", 6)
		},
		single: func(_ int, bp string) []native.Tensor { return FluxMod(g, vec, bp+"modulation.lin", 3) },
	}
	x = fluxTrunk(g, cfg, x, g.Linear(txt, p+"txt_in"), mods, cos, sin, native.Tensor{}, FluxKeeper(g, capture, &blocks))
	mod := FluxMod(g, vec, p+"final_layer.adaLN_modulation.1", 2)
	return FluxFinal(g, x, mod[0], mod[1]), blocks
}

// FluxFinal is the final layer over image tokens x [h, Li]: the layer
// norm modulated by shift and scale, then final_layer.linear.
func FluxFinal(g *infer.Builder, x, shift, scale native.Tensor) native.Tensor {
	x = FluxModulate(g, g.Ctx.Norm(x, FluxNormEps), shift, scale)
	return g.Linear(x, infer.DmPrefix+"final_layer.linear")
}

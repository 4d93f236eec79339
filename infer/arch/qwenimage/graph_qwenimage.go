package qwenimage

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/native"
)

// The Qwen-Image MMDiT on ggml (tokens are [C, L], heads [d, heads, L]), as
// sd.cpp's qwen_image.hpp computes it: text tokens RMS-normed and projected,
// image patch tokens projected, then dual-stream blocks that attend over
// text and image tokens together with separate weights per stream (Flux's
// double blocks with separate q/k/v projections, parameter-free layer norms
// and diffusers' names), and an output layer modulated by the timestep
// embedding alone. Rotary positions put the image grid around the origin
// and the text on the diagonal past it.

// qwenImageEps is the epsilon of every layer norm and RMS norm of the DiT.
const qwenImageEps = 1e-6

// sd.cpp scales the input of the attention output projections by 1/32 and
// of the MLPs' second linear by 1/128 (and their output back), against f16
// overflow on GPUs; on the CPU it changes f16 and q8 activations' rounding
// slightly, so the graph does the same.
const (
	qwenImageOutScale = 1.0 / 32
	qwenImageMLPScale = 1.0 / 128
)

// qwenImagePositions returns the RoPE positions (frame, row, column) of
// txt text tokens followed by a rows×cols grid of image patches, as sd.cpp's
// gen_qwen_image_ids lays them out: patch (i, j) at (0, i - rows/2,
// j - cols/2), text token k at s+k on all three axes, s = max(rows, cols)/2.
func qwenImagePositions(txt, rows, cols int) [][3]float32 {
	pos := make([][3]float32, 0, txt+rows*cols)
	s := max(rows, cols) / 2
	for k := 0; k < txt; k++ {
		v := float32(s + k)
		pos = append(pos, [3]float32{v, v, v})
	}
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			pos = append(pos, [3]float32{0, float32(i - rows/2), float32(j - cols/2)})
		}
	}
	return pos
}

// linearScaled is linear with sd.cpp's input scale s: x·s through the
// weight, the product divided by s, then the bias.
func linearScaled(g *infer.Builder, x native.Tensor, prefix string, s float32) native.Tensor {
	if _, ok := g.Weights.W8A8[prefix+".weight"]; ok {
		return g.Linear(x, prefix)
	}
	w := g.Weight(prefix + ".weight")
	xs := g.Ctx.Scale(x, s)
	y := g.Ctx.Scale(g.Ctx.MulMat(w, xs), 1/s)
	g.Watch(w, xs)
	if g.Has(prefix + ".bias") {
		y = g.Ctx.Add(y, g.Weight(prefix+".bias"))
	}
	return y
}

// qwenImageHeads projects x [h, L] with prefix into heads [d, heads, L]
// and, when norm is not "", RMS-norms each head with norm's weight.
func qwenImageHeads(g *infer.Builder, x native.Tensor, prefix, norm string, d int64) native.Tensor {
	y := g.Linear(x, prefix)
	ne := y.Ne()
	y = g.Ctx.Reshape(y, d, ne[0]/d, ne[1])
	if norm == "" {
		return y
	}
	return g.Ctx.Mul(g.Ctx.RMSNorm(y, qwenImageEps), g.Weight(norm+".weight"))
}

// qwenImageMLP is a stream's feed-forward: net.0.proj, GELU (tanh), net.2.
func qwenImageMLP(g *infer.Builder, x native.Tensor, prefix string) native.Tensor {
	return linearScaled(g, g.Ctx.GELU(g.Linear(x, prefix+".net.0.proj")), prefix+".net.2", qwenImageMLPScale)
}

// qwenImageBlock is transformer_blocks.i: img [h, Li] and txt [h, Lt]
// attend jointly (text first); temb [h] modulates both streams.
func qwenImageBlock(g *infer.Builder, cfg *QwenImageConfig, p string, img, txt, temb, cos, sin native.Tensor) (native.Tensor, native.Tensor) {
	d := int64(cfg.HeadDim)
	im := flux.FluxMod(g, temb, p+"img_mod.1", 6)
	tm := flux.FluxMod(g, temb, p+"txt_mod.1", 6)
	iy := flux.FluxModulate(g, g.Ctx.Norm(img, qwenImageEps), im[0], im[1])
	ty := flux.FluxModulate(g, g.Ctx.Norm(txt, qwenImageEps), tm[0], tm[1])
	a := p + "attn."
	q := g.Ctx.Concat(qwenImageHeads(g, ty, a+"add_q_proj", a+"norm_added_q", d), qwenImageHeads(g, iy, a+"to_q", a+"norm_q", d), 2)
	k := g.Ctx.Concat(qwenImageHeads(g, ty, a+"add_k_proj", a+"norm_added_k", d), qwenImageHeads(g, iy, a+"to_k", a+"norm_k", d), 2)
	v := g.Ctx.Concat(qwenImageHeads(g, ty, a+"add_v_proj", "", d), qwenImageHeads(g, iy, a+"to_v", "", d), 2)
	o := qwenImageAttention(g.Ctx, q, k, v, cos, sin) // [h, Lt+Li]
	h, lt, li := o.Ne()[0], txt.Ne()[1], img.Ne()[1]
	nb := o.Nb()
	ta := g.Ctx.Cont(g.Ctx.View(o, [4]int64{h, lt, 1, 1}, nb[1], nb[1]*lt, nb[1]*lt, 0))
	ia := g.Ctx.Cont(g.Ctx.View(o, [4]int64{h, li, 1, 1}, nb[1], nb[1]*li, nb[1]*li, lt*nb[1]))
	img = g.Ctx.Add(img, g.Ctx.Mul(linearScaled(g, ia, a+"to_out.0", qwenImageOutScale), im[2]))
	txt = g.Ctx.Add(txt, g.Ctx.Mul(linearScaled(g, ta, a+"to_add_out", qwenImageOutScale), tm[2]))
	stream := func(x native.Tensor, mod []native.Tensor, st string) native.Tensor {
		y := qwenImageMLP(g, flux.FluxModulate(g, g.Ctx.Norm(x, qwenImageEps), mod[3], mod[4]), p+st+"_mlp")
		return g.Ctx.Add(x, g.Ctx.Mul(y, mod[5]))
	}
	return stream(img, im, "img"), stream(txt, tm, "txt")
}

// qwenImage builds one evaluation of the DiT: img [InChannels, Li] patch
// tokens, txt [ContextDim, Lt] the text encoder's hidden states, t [1]
// the timestep (sigma·1000), cos and sin [d/2, Lt+Li] the rotary
// embedding. It returns the velocity tokens [OutChannels, Li] and, with
// capture, every block's image tokens.
func qwenImage(g *infer.Builder, cfg *QwenImageConfig, img, txt, t, cos, sin native.Tensor, capture bool) (native.Tensor, []infer.BlockTensor) {
	p := infer.DmPrefix
	var blocks []infer.BlockTensor
	te := p + "time_text_embed.timestep_embedder."
	temb := g.Linear(g.Ctx.SiLU(g.Linear(g.Ctx.TimestepEmbedding(t, 256, 10000), te+"linear_1")), te+"linear_2")
	temb = g.Ctx.Reshape(temb, int64(cfg.Hidden))
	x := g.Linear(img, p+"img_in")
	c := g.Linear(g.Ctx.Mul(g.Ctx.RMSNorm(txt, qwenImageEps), g.Weight(p+"txt_norm.weight")), p+"txt_in")
	for i := 0; i < cfg.Layers; i++ {
		x, c = qwenImageBlock(g, cfg, fmt.Sprintf("%stransformer_blocks.%d.", p, i), x, c, temb, cos, sin)
		if capture {
			blocks = append(blocks, infer.BlockTensor{Name: fmt.Sprintf("transformer_blocks.%d", i), T: g.Output(g.Ctx.Cont(x))})
		}
	}
	// norm_out: its linear gives scale then shift (AdaLayerNormContinuous's order).
	mod := flux.FluxMod(g, temb, p+"norm_out.linear", 2)
	x = flux.FluxModulate(g, g.Ctx.Norm(x, qwenImageEps), mod[1], mod[0])
	return g.Linear(x, p+"proj_out"), blocks
}

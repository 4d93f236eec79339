package sd

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// The LDM UNet (openaimodel.py) of SD 1.x/2.x and SDXL on ggml.

// Norm epsilons: every GroupNorm of sd.cpp's UNet takes 1e-6 (its group
// norm helper fixes that value whatever the block asks for, so the
// ResBlocks' GroupNorm32 is not PyTorch's 1e-5 there); the LayerNorms take
// LayerNormEps. 1e-5 moved the first ResBlock's output by a few 1e-5,
// which q8_0's activation blocks turned into a 41.9 dB image difference
// against sd-cli on the same file (BENCHMARKS.md).
const (
	unetNormEps        = 1e-6
	transformerNormEps = 1e-6
)

// resBlock is a ResBlock: two GroupNorm-SiLU-conv stages with the time
// embedding added between them, plus a skip path.
func resBlock(g *infer.Builder, x, emb native.Tensor, p string) native.Tensor {
	h := g.Conv2d(g.Ctx.SiLU(g.GroupNorm(x, p+"in_layers.0", unetNormEps)), p+"in_layers.2", 1)
	e := g.Linear(g.Ctx.SiLU(emb), p+"emb_layers.1") // [out, N]
	ne := e.Ne()
	h = g.Ctx.Add(h, g.Ctx.Reshape(e, 1, 1, ne[0], ne[1]))
	h = g.Conv2d(g.Ctx.SiLU(g.GroupNorm(h, p+"out_layers.0", unetNormEps)), p+"out_layers.3", 1)
	if g.Has(p + "skip_connection.weight") {
		x = g.Conv2d(x, p+"skip_connection", 1)
	}
	return g.Ctx.Add(h, x)
}

// crossAttention is CrossAttention: queries from x, keys and values from ctx.
func crossAttention(g *infer.Builder, x, ctx native.Tensor, p string, heads int) native.Tensor {
	q := g.Linear(x, p+"to_q")
	k := g.Linear(ctx, p+"to_k")
	v := g.Linear(ctx, p+"to_v")
	return g.Linear(infer.Attention(g.Ctx, q, k, v, heads, false), p+"to_out.0")
}

// spatialTransformer is SpatialTransformer with its BasicTransformerBlocks.
func spatialTransformer(g *infer.Builder, x, ctx native.Tensor, p string, depth, heads int, linearProj bool) native.Tensor {
	ne := x.Ne()
	w, h := ne[0], ne[1]
	in := x
	x = g.GroupNorm(x, p+"norm", transformerNormEps)
	if !linearProj {
		x = g.Conv2d(x, p+"proj_in", 1)
	}
	x = infer.ToTokens(g.Ctx, x)
	if linearProj {
		x = g.Linear(x, p+"proj_in")
	}
	for d := 0; d < depth; d++ {
		b := fmt.Sprintf("%stransformer_blocks.%d.", p, d)
		n1 := g.LayerNorm(x, b+"norm1", infer.LayerNormEps)
		x = g.Ctx.Add(crossAttention(g, n1, n1, b+"attn1.", heads), x)
		x = g.Ctx.Add(crossAttention(g, g.LayerNorm(x, b+"norm2", infer.LayerNormEps), ctx, b+"attn2.", heads), x)
		ff := g.Linear(g.Geglu(g.LayerNorm(x, b+"norm3", infer.LayerNormEps), b+"ff.net.0.proj"), b+"ff.net.2")
		x = g.Ctx.Add(ff, x)
	}
	if linearProj {
		x = g.Linear(x, p+"proj_out")
	}
	x = infer.FromTokens(g.Ctx, x, w, h)
	if !linearProj {
		x = g.Conv2d(x, p+"proj_out", 1)
	}
	return g.Ctx.Add(x, in)
}

// unet builds the UNet's output for latent x [W, H, C, N], timesteps [N],
// context [ctxDim, L, N] and, for a UNet with a class embedding (SDXL),
// the conditioning vector y [ADMChannels, N] (else the zero Tensor). When
// capture is set it also returns every block's output, marked as graph
// outputs.
func unet(g *infer.Builder, cfg *UNetConfig, x, timesteps, ctx, y native.Tensor, capture bool) (native.Tensor, []infer.BlockTensor) {
	p := infer.DmPrefix
	mc := cfg.ModelChannels
	var blocks []infer.BlockTensor
	keep := func(name string, t native.Tensor) {
		if capture {
			blocks = append(blocks, infer.BlockTensor{Name: name, T: t.SetOutput()})
		}
	}
	emb := g.Ctx.TimestepEmbedding(timesteps, mc, 10000)
	emb = g.Linear(g.Ctx.SiLU(g.Linear(emb, p+"time_embed.0")), p+"time_embed.2")
	if cfg.ADMChannels > 0 {
		if !y.Valid() {
			panic(&native.ShapeError{Msg: "unet: the model has a class embedding (label_emb) and no conditioning vector was given"})
		}
		emb = g.Ctx.Add(emb, g.Linear(g.Ctx.SiLU(g.Linear(y, p+"label_emb.0.0")), p+"label_emb.0.2"))
	}

	h := g.Conv2d(x, p+"input_blocks.0.0", 1)
	keep("input_blocks.0", h)
	skips := []native.Tensor{h}
	idx := 1
	for level, m := range cfg.ChannelMult {
		for i := 0; i < cfg.NumResBlocks; i++ {
			b := fmt.Sprintf("%sinput_blocks.%d.", p, idx)
			h = resBlock(g, h, emb, b+"0.")
			if d := cfg.TransformerDepth[level]; d > 0 {
				h = spatialTransformer(g, h, ctx, b+"1.", d, cfg.heads(m*mc), cfg.LinearProj)
			}
			keep(fmt.Sprintf("input_blocks.%d", idx), h)
			skips = append(skips, h)
			idx++
		}
		if level != len(cfg.ChannelMult)-1 {
			h = g.Conv2d(h, fmt.Sprintf("%sinput_blocks.%d.0.op", p, idx), 2)
			keep(fmt.Sprintf("input_blocks.%d", idx), h)
			skips = append(skips, h)
			idx++
		}
	}
	top := cfg.ChannelMult[len(cfg.ChannelMult)-1] * mc
	h = resBlock(g, h, emb, p+"middle_block.0.")
	h = spatialTransformer(g, h, ctx, p+"middle_block.1.", max(cfg.MiddleDepth, 1), cfg.heads(top), cfg.LinearProj)
	h = resBlock(g, h, emb, p+"middle_block.2.")
	keep("middle_block", h)
	idx = 0
	for level := len(cfg.ChannelMult) - 1; level >= 0; level-- {
		m := cfg.ChannelMult[level]
		for i := 0; i <= cfg.NumResBlocks; i++ {
			skip := skips[len(skips)-1]
			skips = skips[:len(skips)-1]
			b := fmt.Sprintf("%soutput_blocks.%d.", p, idx)
			h = resBlock(g, g.Ctx.Concat(h, skip, 2), emb, b+"0.")
			sub := 1
			if d := cfg.TransformerDepth[level]; d > 0 {
				h = spatialTransformer(g, h, ctx, b+"1.", d, cfg.heads(m*mc), cfg.LinearProj)
				sub = 2
			}
			if level > 0 && i == cfg.NumResBlocks {
				h = g.Conv2d(g.Ctx.UpscaleNearest(h, 2), fmt.Sprintf("%s%d.conv", b, sub), 1)
			}
			keep(fmt.Sprintf("output_blocks.%d", idx), h)
			idx++
		}
	}
	h = g.Ctx.SiLU(g.GroupNorm(h, p+"out.0", unetNormEps))
	return g.Conv2d(h, p+"out.2", 1), blocks
}

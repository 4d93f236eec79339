package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/native"
)

// The LDM UNet (openaimodel.py) of SD 1.x/2.x and SDXL on ggml.

// Norm epsilons: the UNet's GroupNorm32 uses PyTorch's default, the
// transformers' GroupNorm 1e-6 (LayerNorm: layerNormEps).
const (
	unetNormEps        = 1e-5
	transformerNormEps = 1e-6
)

// resBlock is a ResBlock: two GroupNorm-SiLU-conv stages with the time
// embedding added between them, plus a skip path.
func (g *builder) resBlock(x, emb native.Tensor, p string) native.Tensor {
	h := g.conv2d(g.c.SiLU(g.groupNorm(x, p+"in_layers.0", unetNormEps)), p+"in_layers.2", 1)
	e := g.linear(g.c.SiLU(emb), p+"emb_layers.1") // [out, N]
	ne := e.Ne()
	h = g.c.Add(h, g.c.Reshape(e, 1, 1, ne[0], ne[1]))
	h = g.conv2d(g.c.SiLU(g.groupNorm(h, p+"out_layers.0", unetNormEps)), p+"out_layers.3", 1)
	if g.has(p + "skip_connection.weight") {
		x = g.conv2d(x, p+"skip_connection", 1)
	}
	return g.c.Add(h, x)
}

// crossAttention is CrossAttention: queries from x, keys and values from ctx.
func (g *builder) crossAttention(x, ctx native.Tensor, p string, heads int) native.Tensor {
	q := g.linear(x, p+"to_q")
	k := g.linear(ctx, p+"to_k")
	v := g.linear(ctx, p+"to_v")
	return g.linear(attention(g.c, q, k, v, heads, false), p+"to_out.0")
}

// spatialTransformer is SpatialTransformer with its BasicTransformerBlocks.
func (g *builder) spatialTransformer(x, ctx native.Tensor, p string, depth, heads int, linearProj bool) native.Tensor {
	ne := x.Ne()
	w, h := ne[0], ne[1]
	in := x
	x = g.groupNorm(x, p+"norm", transformerNormEps)
	if !linearProj {
		x = g.conv2d(x, p+"proj_in", 1)
	}
	x = toTokens(g.c, x)
	if linearProj {
		x = g.linear(x, p+"proj_in")
	}
	for d := 0; d < depth; d++ {
		b := fmt.Sprintf("%stransformer_blocks.%d.", p, d)
		n1 := g.layerNorm(x, b+"norm1", layerNormEps)
		x = g.c.Add(g.crossAttention(n1, n1, b+"attn1.", heads), x)
		x = g.c.Add(g.crossAttention(g.layerNorm(x, b+"norm2", layerNormEps), ctx, b+"attn2.", heads), x)
		ff := g.linear(g.geglu(g.layerNorm(x, b+"norm3", layerNormEps), b+"ff.net.0.proj"), b+"ff.net.2")
		x = g.c.Add(ff, x)
	}
	if linearProj {
		x = g.linear(x, p+"proj_out")
	}
	x = fromTokens(g.c, x, w, h)
	if !linearProj {
		x = g.conv2d(x, p+"proj_out", 1)
	}
	return g.c.Add(x, in)
}

// unet builds the UNet's output for latent x [W, H, C, N], timesteps [N],
// context [ctxDim, L, N] and, for a UNet with a class embedding (SDXL),
// the conditioning vector y [ADMChannels, N] (else the zero Tensor). When
// capture is set it also returns every block's output, marked as graph
// outputs.
func (g *builder) unet(cfg *UNetConfig, x, timesteps, ctx, y native.Tensor, capture bool) (native.Tensor, []blockTensor) {
	p := dmPrefix
	mc := cfg.ModelChannels
	var blocks []blockTensor
	keep := func(name string, t native.Tensor) {
		if capture {
			blocks = append(blocks, blockTensor{name, t.SetOutput()})
		}
	}
	emb := g.c.TimestepEmbedding(timesteps, mc, 10000)
	emb = g.linear(g.c.SiLU(g.linear(emb, p+"time_embed.0")), p+"time_embed.2")
	if cfg.ADMChannels > 0 {
		if !y.Valid() {
			panic(&native.ShapeError{Msg: "unet: the model has a class embedding (label_emb) and no conditioning vector was given"})
		}
		emb = g.c.Add(emb, g.linear(g.c.SiLU(g.linear(y, p+"label_emb.0.0")), p+"label_emb.0.2"))
	}

	h := g.conv2d(x, p+"input_blocks.0.0", 1)
	keep("input_blocks.0", h)
	skips := []native.Tensor{h}
	idx := 1
	for level, m := range cfg.ChannelMult {
		for i := 0; i < cfg.NumResBlocks; i++ {
			b := fmt.Sprintf("%sinput_blocks.%d.", p, idx)
			h = g.resBlock(h, emb, b+"0.")
			if d := cfg.TransformerDepth[level]; d > 0 {
				h = g.spatialTransformer(h, ctx, b+"1.", d, cfg.heads(m*mc), cfg.LinearProj)
			}
			keep(fmt.Sprintf("input_blocks.%d", idx), h)
			skips = append(skips, h)
			idx++
		}
		if level != len(cfg.ChannelMult)-1 {
			h = g.conv2d(h, fmt.Sprintf("%sinput_blocks.%d.0.op", p, idx), 2)
			keep(fmt.Sprintf("input_blocks.%d", idx), h)
			skips = append(skips, h)
			idx++
		}
	}
	top := cfg.ChannelMult[len(cfg.ChannelMult)-1] * mc
	h = g.resBlock(h, emb, p+"middle_block.0.")
	h = g.spatialTransformer(h, ctx, p+"middle_block.1.", max(cfg.MiddleDepth, 1), cfg.heads(top), cfg.LinearProj)
	h = g.resBlock(h, emb, p+"middle_block.2.")
	keep("middle_block", h)
	idx = 0
	for level := len(cfg.ChannelMult) - 1; level >= 0; level-- {
		m := cfg.ChannelMult[level]
		for i := 0; i <= cfg.NumResBlocks; i++ {
			skip := skips[len(skips)-1]
			skips = skips[:len(skips)-1]
			b := fmt.Sprintf("%soutput_blocks.%d.", p, idx)
			h = g.resBlock(g.c.Concat(h, skip, 2), emb, b+"0.")
			sub := 1
			if d := cfg.TransformerDepth[level]; d > 0 {
				h = g.spatialTransformer(h, ctx, b+"1.", d, cfg.heads(m*mc), cfg.LinearProj)
				sub = 2
			}
			if level > 0 && i == cfg.NumResBlocks {
				h = g.conv2d(g.c.UpscaleNearest(h, 2), fmt.Sprintf("%s%d.conv", b, sub), 1)
			}
			keep(fmt.Sprintf("output_blocks.%d", idx), h)
			idx++
		}
	}
	h = g.c.SiLU(g.groupNorm(h, p+"out.0", unetNormEps))
	return g.conv2d(h, p+"out.2", 1), blocks
}

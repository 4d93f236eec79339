package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/native"
)

// clip builds the CLIP text transformer (Hugging Face naming, which
// names.Convert also gives OpenCLIP checkpoints) for token ids [L]
// (L <= Positions) and returns the hidden states [Hidden, L] of the layer
// cfg.Skip selects, after the final layer norm.
func (g *builder) clip(cfg *CLIPConfig, ids native.Tensor) native.Tensor {
	p := clipPrefix
	l := ids.Ne()[0]
	x := g.c.GetRows(g.weight(p+"embeddings.token_embedding.weight"), ids)
	pos := g.weight(p + "embeddings.position_embedding.weight")
	pne, pnb := pos.Ne(), pos.Nb()
	if l > pne[1] {
		panic(&native.ShapeError{Msg: fmt.Sprintf("clip: %d tokens, %d positions", l, pne[1])})
	}
	x = g.c.Add(x, g.c.View(pos, [4]int64{pne[0], l, 1, 1}, pnb[1], pnb[1]*l, pnb[1]*l, 0))
	layers := cfg.Layers - (cfg.Skip - 1)
	for i := 0; i < layers; i++ {
		b := fmt.Sprintf("%sencoder.layers.%d.", p, i)
		h := g.layerNorm(x, b+"layer_norm1", layerNormEps)
		var q, k, v native.Tensor
		if cfg.FusedQKV {
			qkv := g.linear(h, b+"self_attn.in_proj")
			ne, nb := qkv.Ne(), qkv.Nb()
			third := [4]int64{ne[0] / 3, ne[1], ne[2], ne[3]}
			q = g.c.Cont(g.c.View(qkv, third, nb[1], nb[2], nb[3], 0))
			k = g.c.Cont(g.c.View(qkv, third, nb[1], nb[2], nb[3], third[0]*nb[0]))
			v = g.c.Cont(g.c.View(qkv, third, nb[1], nb[2], nb[3], 2*third[0]*nb[0]))
		} else {
			q = g.linear(h, b+"self_attn.q_proj")
			k = g.linear(h, b+"self_attn.k_proj")
			v = g.linear(h, b+"self_attn.v_proj")
		}
		a := attention(g.c, q, k, v, cfg.Heads, true)
		x = g.c.Add(x, g.linear(a, b+"self_attn.out_proj"))
		h = g.linear(g.layerNorm(x, b+"layer_norm2", layerNormEps), b+"mlp.fc1")
		if cfg.QuickGELU {
			h = g.c.GELUQuick(h)
		} else {
			h = g.c.GELU(h)
		}
		x = g.c.Add(x, g.linear(h, b+"mlp.fc2"))
	}
	return g.layerNorm(x, p+"final_layer_norm", layerNormEps)
}

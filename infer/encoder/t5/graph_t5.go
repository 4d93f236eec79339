package t5

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// t5 builds the T5 encoder (T5 v1.1: pre-norm RMS layer norms, attention
// with a relative position bias and no 1/√d scaling, gated-GELU
// feed-forward, a final norm) under cfg.Prefix for token ids [L] and
// returns the hidden states [Hidden, L] after the final norm. buckets
// [L·L] (I32, from t5Buckets) are the relative-position buckets of every
// (query, key) pair, query-major; layer 0's relative_attention_bias turns
// them into the bias all layers share (T5 v1.1), or each layer's own table
// into its bias (UMT5, cfg.LayerBias). mask, when valid, is an additive
// key mask [L] (F32: 0 keeps a key, -Inf drops it) added to the bias.
func t5(g *infer.Builder, cfg *T5Config, ids, buckets, mask native.Tensor) native.Tensor {
	p := cfg.Prefix
	l := ids.Ne()[0]
	if n := buckets.Ne()[0]; n != l*l {
		panic(&native.ShapeError{Msg: fmt.Sprintf("t5: %d buckets for %d tokens", n, l)})
	}
	x := g.Ctx.GetRows(g.Weight(cfg.Embedding), ids) // [Hidden, L]
	layerBias := func(i int) native.Tensor {
		rel := g.Weight(cfg.bias(i))
		heads := rel.Ne()[0]
		bias := g.Ctx.Reshape(g.Ctx.GetRows(rel, buckets), heads, l, l) // [heads, Lk, Lq]
		bias = g.Ctx.Cont(g.Ctx.Permute(bias, 2, 0, 1, 3))              // [Lk, Lq, heads]
		if mask.Valid() {
			bias = g.Ctx.Add(bias, mask)
		}
		return bias
	}
	bias := layerBias(0)
	for i := 0; i < cfg.Layers; i++ {
		b := fmt.Sprintf("%sencoder.block.%d.layer.", p, i)
		if cfg.LayerBias && i > 0 {
			bias = layerBias(i)
		}
		h := t5Norm(g, x, b+"0.layer_norm")
		q := g.Linear(h, b+"0.SelfAttention.q")
		k := g.Linear(h, b+"0.SelfAttention.k")
		v := g.Linear(h, b+"0.SelfAttention.v")
		a := t5Attention(g.Ctx, q, k, v, bias, cfg.Heads)
		x = g.Ctx.Add(x, g.Linear(a, b+"0.SelfAttention.o"))
		h = t5Norm(g, x, b+"1.layer_norm")
		gate := g.Ctx.GELU(g.Linear(h, b+"1.DenseReluDense.wi_0"))
		y := g.Ctx.Mul(gate, g.Linear(h, b+"1.DenseReluDense.wi_1"))
		// wo sees the product scaled down (t5FFScale), and the imatrix
		// records that scaled input, as sd-cli's collector does.
		y = g.Ctx.Scale(g.Linear(g.Ctx.Scale(y, t5FFScale), b+"1.DenseReluDense.wo"), 1/t5FFScale)
		x = g.Ctx.Add(x, y)
	}
	return t5Norm(g, x, p+"encoder.final_layer_norm")
}

// t5Norm is T5LayerNorm: x / rms(x) times prefix.weight, without a mean or bias.
func t5Norm(g *infer.Builder, x native.Tensor, prefix string) native.Tensor {
	return g.Ctx.Mul(g.Ctx.RMSNorm(x, t5LayerNormEps), g.Weight(prefix+".weight"))
}

// t5Attention computes softmax(QKᵀ + bias)V per head (T5 does not scale by
// 1/√d: its initialisation folds that into the weights): q, k, v [C, L],
// C = heads·d, and bias [Lk, Lq, heads].
func t5Attention(c *native.Context, q, k, v, bias native.Tensor, heads int) native.Tensor {
	nq := q.Ne()
	ch, l := nq[0], nq[1]
	if heads <= 0 || ch%int64(heads) != 0 {
		panic(&native.ShapeError{Msg: fmt.Sprintf("t5 attention: %d channels in %d heads", ch, heads)})
	}
	d, h := ch/int64(heads), int64(heads)
	qh := c.Cont(c.Permute(c.Reshape(q, d, h, l), 0, 2, 1, 3)) // [d, L, heads]
	kh := c.Cont(c.Permute(c.Reshape(k, d, h, l), 0, 2, 1, 3))
	vt := c.Cont(c.Permute(c.Reshape(v, d, h, l), 1, 2, 0, 3)) // [L, d, heads]
	kq := c.SoftMax(c.Add(c.MulMat(kh, qh), bias), 1)          // [Lk, Lq, heads]
	o := c.MulMat(vt, kq)                                      // [d, Lq, heads]
	o = c.Cont(c.Permute(o, 0, 2, 1, 3))                       // [d, heads, Lq]
	return c.Reshape(o, ch, l)
}

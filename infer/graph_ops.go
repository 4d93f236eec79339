package infer

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// The building blocks of the SD graphs, on ggml's layout: an image is
// [W, H, C, N] (innermost first), a token sequence [C, L, N], a linear
// weight [in, out] (PyTorch's [out, in]) and a conv kernel [KW, KH, IC, OC].
// A missing or misshapen weight panics with a *native.ShapeError, which the
// graph builders recover into an error (native.Recover), because ggml
// itself would abort the process.

// layerNormEps is PyTorch's LayerNorm default, which every transformer
// here keeps.
const layerNormEps = 1e-5

// blockTensor is one network block's output tensor, kept for --compare.
type blockTensor struct {
	name string
	t    native.Tensor
}

// builder is one graph under construction: its context and the weights it reads.
type builder struct {
	c    *native.Context
	w    *weightSet
	imat *imatrixPass // imatrix collection, nil when off
	// convScale, when not 0, scales every convolution's input by it and
	// the result back (VAEConfig.ConvScale).
	convScale float32
	// outputs are extra graph outputs that are not ancestors of the main
	// one (a text encoder's pooled output beside its hidden states).
	outputs []native.Tensor
	// expand are nodes added to the graph first, in this order: a write
	// to state that outlives the graph after the node that reads the old
	// values (a video VAE's caches).
	expand []native.Tensor
	// acts holds the W8A8 activations quantized so far (linearW8A8).
	acts map[actKey]native.Tensor
	// consts are the graph's constant inputs (constant), filled with the
	// inputs the build returns.
	consts []input
}

// constant returns an F32 graph input of shape ne holding values (a
// table of numbers a graph needs that no weight file carries).
func (g *builder) constant(values []float32, ne ...int64) native.Tensor {
	t := newInput(g, formats.F32, ne...)
	g.consts = append(g.consts, input{t: t, f32: values})
	return t
}

// output marks t as an extra output of the graph, computed and kept even
// when the main output does not depend on it.
func (g *builder) output(t native.Tensor) native.Tensor {
	t = t.SetOutput()
	g.outputs = append(g.outputs, t)
	return t
}

// weight returns the weight called name, or panics with a shape error.
func (g *builder) weight(name string) native.Tensor {
	t, ok := g.w.get(name)
	if !ok {
		panic(&native.ShapeError{Msg: fmt.Sprintf("model has no tensor %q", name)})
	}
	return t
}

// has reports whether the model has a tensor called name.
func (g *builder) has(name string) bool {
	_, ok := g.w.get(name)
	return ok
}

// linear applies prefix.weight (and prefix.bias when present) to x [in, L, ...].
func (g *builder) linear(x native.Tensor, prefix string) native.Tensor {
	if group, ok := g.w.w8a8[prefix+".weight"]; ok {
		return g.linearW8A8(x, prefix, group)
	}
	w := g.weight(prefix + ".weight")
	y := g.c.MulMat(w, x)
	g.watch(w, x)
	if g.has(prefix + ".bias") {
		y = g.c.Add(y, g.weight(prefix+".bias"))
	}
	return y
}

// conv2d applies the convolution prefix.weight/.bias to x [W, H, IC, N]
// with "same" padding for odd kernels.
func (g *builder) conv2d(x native.Tensor, prefix string, stride int) native.Tensor {
	return g.convPad(x, prefix, stride, int(g.weight(prefix + ".weight").Ne()[0]/2))
}

// convPad is conv2d with an explicit padding.
func (g *builder) convPad(x native.Tensor, prefix string, stride, pad int) native.Tensor {
	k := g.weight(prefix + ".weight")
	if g.convScale != 0 {
		x = g.c.Scale(x, g.convScale)
	}
	y := g.c.Conv2D(k, x, stride, pad)
	if g.convScale != 0 {
		y = g.c.Scale(y, 1/g.convScale)
	}
	if g.has(prefix + ".bias") {
		b := g.weight(prefix + ".bias")
		y = g.c.Add(y, g.c.Reshape(b, 1, 1, b.Ne()[0], 1))
	}
	return y
}

// groupNorm applies GroupNorm(32) with prefix's affine weight and bias to x [W, H, C, N].
func (g *builder) groupNorm(x native.Tensor, prefix string, eps float32) native.Tensor {
	y := g.c.GroupNorm(x, 32, eps)
	w, b := g.weight(prefix+".weight"), g.weight(prefix+".bias")
	c := w.Ne()[0]
	y = g.c.Mul(y, g.c.Reshape(w, 1, 1, c, 1))
	return g.c.Add(y, g.c.Reshape(b, 1, 1, c, 1))
}

// layerNorm applies LayerNorm over ne0 with prefix's weight and bias.
func (g *builder) layerNorm(x native.Tensor, prefix string, eps float32) native.Tensor {
	y := g.c.Norm(x, eps)
	y = g.c.Mul(y, g.weight(prefix+".weight"))
	return g.c.Add(y, g.weight(prefix+".bias"))
}

// attention computes softmax(QKᵀ/√d)V per head: q [C, Lq, N], k and v
// [C, Lk, N], C = heads·d; causal masks keys after each query (CLIP).
func attention(c *native.Context, q, k, v native.Tensor, heads int, causal bool) native.Tensor {
	nq, nk := q.Ne(), k.Ne()
	ch, lq, n, lk := nq[0], nq[1], nq[2], nk[1]
	if heads <= 0 || ch%int64(heads) != 0 {
		panic(&native.ShapeError{Msg: fmt.Sprintf("attention: %d channels in %d heads", ch, heads)})
	}
	d := ch / int64(heads)
	h := int64(heads)
	// [d, heads, L, N] -> [d, L, heads, N]
	qh := c.Reshape(c.Cont(c.Permute(c.Reshape(q, d, h, lq, n), 0, 2, 1, 3)), d, lq, h*n)
	kh := c.Reshape(c.Cont(c.Permute(c.Reshape(k, d, h, lk, n), 0, 2, 1, 3)), d, lk, h*n)
	// v as [Lk, d, heads, N] so that the second product contracts over Lk.
	vt := c.Reshape(c.Cont(c.Permute(c.Reshape(v, d, h, lk, n), 1, 2, 0, 3)), lk, d, h*n)
	kq := c.MulMat(kh, qh) // [Lk, Lq, heads·N]
	if causal {
		kq = c.DiagMaskInf(kq, 0)
	}
	kq = c.SoftMax(kq, float32(1/math.Sqrt(float64(d))))
	o := c.MulMat(vt, kq) // [d, Lq, heads·N]
	o = c.Cont(c.Permute(c.Reshape(o, d, lq, h, n), 0, 2, 1, 3))
	return c.Reshape(o, ch, lq, n)
}

// geglu applies diffusers' GEGLU: the projection gives [value; gate] of
// width 2·inner, and the result is value·gelu(gate).
func (g *builder) geglu(x native.Tensor, prefix string) native.Tensor {
	y := g.linear(x, prefix)
	ne, nb := y.Ne(), y.Nb()
	inner := ne[0] / 2
	half := [4]int64{inner, ne[1], ne[2], ne[3]}
	val := g.c.Cont(g.c.View(y, half, nb[1], nb[2], nb[3], 0))
	gate := g.c.Cont(g.c.View(y, half, nb[1], nb[2], nb[3], inner*nb[0]))
	return g.c.Mul(val, g.c.GELU(gate))
}

// toTokens turns an image [W, H, C, N] into tokens [C, W·H, N].
func toTokens(c *native.Context, x native.Tensor) native.Tensor {
	ne := x.Ne()
	return c.Reshape(c.Cont(c.Permute(x, 1, 2, 0, 3)), ne[2], ne[0]*ne[1], ne[3])
}

// fromTokens turns tokens [C, W·H, N] back into an image [W, H, C, N].
func fromTokens(c *native.Context, t native.Tensor, w, h int64) native.Tensor {
	ne := t.Ne()
	x := c.Reshape(t, ne[0], w, h, ne[2])
	return c.Cont(c.Permute(x, 2, 0, 1, 3))
}

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

// LayerNormEps is PyTorch's LayerNorm default, which every transformer
// here keeps.
const LayerNormEps = 1e-5

// BlockTensor is one network block's output tensor, kept for --compare.
type BlockTensor struct {
	// Name is the block's name in --compare's report.
	Name string
	// T is the block's output.
	T native.Tensor
}

// Builder is one graph under construction: its context and the weights it reads.
type Builder struct {
	// Ctx is the graph's ggml context, where the graph's operations are made.
	Ctx *native.Context
	// Weights holds the model's weights the graph reads (Weight, Linear, ...).
	Weights *WeightSet
	imat    *imatrixPass // imatrix collection, nil when off
	// convScale, when not 0, scales every convolution's input by it and
	// the result back (VAEConfig.ConvScale).
	convScale float32
	// Outputs are extra graph outputs that are not ancestors of the main
	// one (a text encoder's pooled output beside its hidden states).
	Outputs []native.Tensor
	// Expand are nodes added to the graph first, in this order: a write
	// to state that outlives the graph after the node that reads the old
	// values (a video VAE's caches).
	Expand []native.Tensor
	// acts holds the W8A8 activations quantized so far (linearW8A8).
	acts map[actKey]native.Tensor
	// Consts are the graph's constant inputs (constant), filled with the
	// inputs the build returns.
	Consts []Input
}

// Constant returns an F32 graph input of shape ne holding values (a
// table of numbers a graph needs that no weight file carries).
func (g *Builder) Constant(values []float32, ne ...int64) native.Tensor {
	t := NewInput(g, formats.F32, ne...)
	g.Consts = append(g.Consts, Input{T: t, F32: values})
	return t
}

// Output marks t as an extra output of the graph, computed and kept even
// when the main output does not depend on it.
func (g *Builder) Output(t native.Tensor) native.Tensor {
	t = t.SetOutput()
	g.Outputs = append(g.Outputs, t)
	return t
}

// Weight returns the weight called name, or panics with a shape error.
func (g *Builder) Weight(name string) native.Tensor {
	t, ok := g.Weights.get(name)
	if !ok {
		panic(&native.ShapeError{Msg: fmt.Sprintf("model has no tensor %q", name)})
	}
	return t
}

// Has reports whether the model has a tensor called name.
func (g *Builder) Has(name string) bool {
	_, ok := g.Weights.get(name)
	return ok
}

// Linear applies prefix.weight (and prefix.bias when present) to x [in, L, ...].
func (g *Builder) Linear(x native.Tensor, prefix string) native.Tensor {
	if group, ok := g.Weights.W8A8[prefix+".weight"]; ok {
		return g.linearW8A8(x, prefix, group)
	}
	w := g.Weight(prefix + ".weight")
	y := g.Ctx.MulMat(w, x)
	g.Watch(w, x)
	if g.Has(prefix + ".bias") {
		y = g.Ctx.Add(y, g.Weight(prefix+".bias"))
	}
	return y
}

// Conv2d applies the convolution prefix.weight/.bias to x [W, H, IC, N]
// with "same" padding for odd kernels.
func (g *Builder) Conv2d(x native.Tensor, prefix string, stride int) native.Tensor {
	return g.ConvPad(x, prefix, stride, int(g.Weight(prefix + ".weight").Ne()[0]/2))
}

// ConvPad is conv2d with an explicit padding.
func (g *Builder) ConvPad(x native.Tensor, prefix string, stride, pad int) native.Tensor {
	k := g.Weight(prefix + ".weight")
	if g.convScale != 0 {
		x = g.Ctx.Scale(x, g.convScale)
	}
	y := g.Ctx.Conv2D(k, x, stride, pad)
	if g.convScale != 0 {
		y = g.Ctx.Scale(y, 1/g.convScale)
	}
	if g.Has(prefix + ".bias") {
		b := g.Weight(prefix + ".bias")
		y = g.Ctx.Add(y, g.Ctx.Reshape(b, 1, 1, b.Ne()[0], 1))
	}
	return y
}

// GroupNorm applies GroupNorm(32) with prefix's affine weight and bias to x [W, H, C, N].
func (g *Builder) GroupNorm(x native.Tensor, prefix string, eps float32) native.Tensor {
	y := g.Ctx.GroupNorm(x, 32, eps)
	w, b := g.Weight(prefix+".weight"), g.Weight(prefix+".bias")
	c := w.Ne()[0]
	y = g.Ctx.Mul(y, g.Ctx.Reshape(w, 1, 1, c, 1))
	return g.Ctx.Add(y, g.Ctx.Reshape(b, 1, 1, c, 1))
}

// LayerNorm applies LayerNorm over ne0 with prefix's weight and bias.
func (g *Builder) LayerNorm(x native.Tensor, prefix string, eps float32) native.Tensor {
	y := g.Ctx.Norm(x, eps)
	y = g.Ctx.Mul(y, g.Weight(prefix+".weight"))
	return g.Ctx.Add(y, g.Weight(prefix+".bias"))
}

// Attention computes softmax(QKᵀ/√d)V per head: q [C, Lq, N], k and v
// [C, Lk, N], C = heads·d; causal masks keys after each query (CLIP). Its
// two F32 products are summed as sd-cli's ggml sums them (mulMatF32).
func Attention(c *native.Context, q, k, v native.Tensor, heads int, causal bool) native.Tensor {
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
	kq := mulMatF32(c, kh, qh) // [Lk, Lq, heads·N]
	if causal {
		kq = c.DiagMaskInf(kq, 0)
	}
	kq = c.SoftMax(kq, float32(1/math.Sqrt(float64(d))))
	o := mulMatF32(c, vt, kq) // [d, Lq, heads·N]
	o = c.Cont(c.Permute(c.Reshape(o, d, lq, h, n), 0, 2, 1, 3))
	return c.Reshape(o, ch, lq, n)
}

// mulMatF32 is MulMat for F32 operands a [K, ...] and b [K, ...] summed
// as sd-cli's ggml sums them. gcc contracts ggml's scalar dot-product tail
// in sd-cli's build: four products at a time rounded, the last K%4 fused
// (native.MulMatDotF32); the linked ggml, built with -ffp-contract=off,
// rounds them too, so the two differ only where K%4 is not 0 (CLIP's 77
// tokens), and only there does the slower custom op run. A k-quant product
// downstream carries such a last bit on (the q6_K SD 1.5 file: 43.5 dB
// against sd-cli with ggml's product, 51.7 dB with this).
func mulMatF32(c *native.Context, a, b native.Tensor) native.Tensor {
	if a.Ne()[0]%4 != 0 {
		return c.MulMatDotF32(a, b)
	}
	return c.MulMat(a, b)
}

// Geglu applies diffusers' GEGLU: the projection gives [value; gate] of
// width 2·inner, and the result is value·gelu(gate).
func (g *Builder) Geglu(x native.Tensor, prefix string) native.Tensor {
	y := g.Linear(x, prefix)
	ne, nb := y.Ne(), y.Nb()
	inner := ne[0] / 2
	half := [4]int64{inner, ne[1], ne[2], ne[3]}
	val := g.Ctx.Cont(g.Ctx.View(y, half, nb[1], nb[2], nb[3], 0))
	gate := g.Ctx.Cont(g.Ctx.View(y, half, nb[1], nb[2], nb[3], inner*nb[0]))
	return g.Ctx.Mul(val, g.Ctx.GELU(gate))
}

// ToTokens turns an image [W, H, C, N] into tokens [C, W·H, N].
func ToTokens(c *native.Context, x native.Tensor) native.Tensor {
	ne := x.Ne()
	return c.Reshape(c.Cont(c.Permute(x, 1, 2, 0, 3)), ne[2], ne[0]*ne[1], ne[3])
}

// FromTokens turns tokens [C, W·H, N] back into an image [W, H, C, N].
func FromTokens(c *native.Context, t native.Tensor, w, h int64) native.Tensor {
	ne := t.Ne()
	x := c.Reshape(t, ne[0], w, h, ne[2])
	return c.Cont(c.Permute(x, 2, 0, 1, 3))
}

package qwenimage

import (
	"math"

	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/native"
)

// qwenImageAttention is fluxAttention with both products summed as
// stable-diffusion.cpp's CPU build sums them (native.MulMatDotF32). Its
// Qwen-Image attends over the text and image tokens unpadded, so the
// sequence is rarely a whole number of ggml's 32-value runs, and sd-cli's
// ggml (built with -march=native, where gcc fuses the dot product's scalar
// tail) and the linked ggml (its sgemm, or separately rounded products)
// part in the last bits of every attention output, which the q8_0
// activations of the next products turn into whole quantization steps:
// with the text encoder's rotation aligned too (llmRope), 51.1 dB against
// sd-cli instead of 50.3 (BENCHMARKS.md).
func qwenImageAttention(c *native.Context, q, k, v, cos, sin native.Tensor) native.Tensor {
	ne := q.Ne()
	d, heads, l := ne[0], ne[1], ne[2]
	qr := flux.FluxRotate(c, q, cos, sin)  // [d, L, heads]
	kr := flux.FluxRotate(c, k, cos, sin)  // [d, L, heads]
	vt := c.Cont(c.Permute(v, 1, 2, 0, 3)) // [L, d, heads]
	kq := c.MulMatDotF32(kr, qr)           // [Lk, Lq, heads]
	kq = c.SoftMax(kq, float32(1/math.Sqrt(float64(d))))
	o := c.MulMatDotF32(vt, kq)          // [d, Lq, heads]
	o = c.Cont(c.Permute(o, 0, 2, 1, 3)) // [d, heads, Lq]
	return c.Reshape(o, d*heads, l)
}

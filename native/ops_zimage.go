//go:build cgo

package native

/*
#include <stdint.h>

// ggml operations the Z-Image DiT adds (declared in their own file so that
// other families' additions do not collide with these).
struct ggml_context;
struct ggml_tensor;
struct ggml_tensor * ggml_tanh(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_swiglu_split(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_repeat_4d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
*/
import "C"

// Tanh returns tanh(a) elementwise.
func (c *Context) Tanh(a Tensor) Tensor { return c.op(C.ggml_tanh(c.c, a.p)) }

// SwiGLU returns silu(a)·b elementwise in one kernel, as ggml_swiglu_split
// computes it (a and b of one shape).
func (c *Context) SwiGLU(a, b Tensor) Tensor {
	if a.Ne() != b.Ne() {
		shapeErr("swiglu: %v and %v", a.Ne(), b.Ne())
	}
	return c.op(C.ggml_swiglu_split(c.c, a.p, b.p))
}

// Repeat tiles a into the shape ne (each of a's dims dividing ne's).
func (c *Context) Repeat(a Tensor, ne [4]int64) Tensor {
	na := a.Ne()
	for i := range 4 {
		if na[i] == 0 || ne[i]%na[i] != 0 {
			shapeErr("repeat: %v does not tile %v", na, ne)
		}
	}
	return c.op(C.ggml_repeat_4d(c.c, a.p, C.int64_t(ne[0]), C.int64_t(ne[1]), C.int64_t(ne[2]), C.int64_t(ne[3])))
}

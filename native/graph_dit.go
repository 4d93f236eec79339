//go:build cgo

package native

/*
#include <stdint.h>

// The ops the diffusion transformers (Flux's MMDiT, T5) add to graph.go's set.
struct ggml_context;
struct ggml_tensor;

struct ggml_tensor * ggml_rms_norm(struct ggml_context * ctx, struct ggml_tensor * a, float eps);
*/
import "C"

// RMSNorm divides each row (ne0) by its root mean square: x / sqrt(mean(x²) + eps).
func (c *Context) RMSNorm(a Tensor, eps float32) Tensor {
	return c.op(C.ggml_rms_norm(c.c, a.p, C.float(eps)))
}

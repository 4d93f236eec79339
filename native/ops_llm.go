//go:build cgo

package native

/*
#include <stdint.h>

// ggml's rotary embedding, declared here (beside graph.go's declarations)
// so that this addition stays in its own file.
struct ggml_context;
struct ggml_tensor;
struct ggml_tensor * ggml_rope_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * c,
	int n_dims, int mode, int n_ctx_orig, float freq_base, float freq_scale, float ext_factor, float attn_factor,
	float beta_fast, float beta_slow);
*/
import "C"

import "github.com/sdtool/sdtool/formats"

// Rope applies rotary position embeddings to a [d, heads, L, N] with the
// positions pos [L] (I32): pair i of the first dims channels turns by
// pos·base^(-2i/dims), paired as mode says (RopeNormal, RopeNeox); channels
// past dims are kept. No context extension (YaRN) is applied.
func (c *Context) Rope(a, pos Tensor, dims, mode int, base float32) Tensor {
	na := a.Ne()
	if pos.Type() != formats.I32 || pos.Ne()[0] != na[2] {
		shapeErr("rope: %v positions for %v", pos.Ne(), na)
	}
	if dims <= 0 || dims%2 != 0 || int64(dims) > na[0] || (mode != RopeNormal && mode != RopeNeox) {
		shapeErr("rope: %d dims in mode %d for %v", dims, mode, na)
	}
	return c.op(C.ggml_rope_ext(c.c, a.p, pos.p, nil, C.int(dims), C.int(mode), 0, C.float(base), 1, 0, 1, 0, 0))
}

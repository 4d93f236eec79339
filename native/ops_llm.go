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
struct ggml_tensor * ggml_rope_multi(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * c,
	int n_dims, int * sections, int mode, int n_ctx_orig, float freq_base, float freq_scale, float ext_factor,
	float attn_factor, float beta_fast, float beta_slow);
*/
import "C"

import (
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

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

// RopeMulti applies ggml's multimodal rotary embedding (Qwen2-VL's M-RoPE,
// mode RopeMulti) to a [d, heads, L, N]: pos [4·L] (I32) holds four
// position rows (time, height, width, extra), and sections splits the
// dims/2 rotated pairs among them in that order; pairs are NeoX's.
func (c *Context) RopeMulti(a, pos Tensor, dims int, sections [4]int, base float32) Tensor {
	na := a.Ne()
	if pos.Type() != formats.I32 || pos.Ne()[0] != 4*na[2] {
		shapeErr("rope_multi: %v positions for %v", pos.Ne(), na)
	}
	if dims <= 0 || dims%2 != 0 || int64(dims) > na[0] || sections[0]+sections[1]+sections[2]+sections[3] > dims/2 {
		shapeErr("rope_multi: %d dims in sections %v for %v", dims, sections, na)
	}
	var s [4]C.int
	for i, v := range sections {
		s[i] = C.int(v)
	}
	return c.op(C.ggml_rope_multi(c.c, a.p, pos.p, nil, C.int(dims), (*C.int)(unsafe.Pointer(&s[0])), C.int(RopeMRoPE), 0, C.float(base), 1, 0, 1, 0, 0))
}

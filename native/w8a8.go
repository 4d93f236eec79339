//go:build cgo

package native

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include "w8a8.h"

struct ggml_context;
struct ggml_tensor;
typedef void (*sdt_w8a8_op_t)(struct ggml_tensor * dst, int ith, int nth, void * userdata);
struct ggml_tensor * ggml_custom_4d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
	struct ggml_tensor ** args, int n_args, sdt_w8a8_op_t fun, int n_tasks, void * userdata);
void * ggml_get_data(const struct ggml_tensor * t);
bool ggml_is_contiguous(const struct ggml_tensor * t);
void ggml_backend_tensor_get(const struct ggml_tensor * t, void * data, size_t offset, size_t size);

static void sdt_w8a8_get(const struct ggml_tensor * t, void * data, size_t size) {
	ggml_backend_tensor_get(t, data, 0, size);
}

struct sdt_w8a8_prefix {
	int type;
	void * buffer;
	int64_t ne[4];
	size_t nb[4];
};

// sdt_w8a8_args is what one op reads: its operands and the rotation
// group. It lives in C memory (ggml keeps only the pointer) and is freed
// when the Go Context that built the op is collected.
struct sdt_w8a8_args {
	struct ggml_tensor * t[4];
	int group;
	int levels; // activation code range, 0 for INT8's 127
	sdt_w8a8_sched sched; // zeroed by calloc
};

static const struct sdt_w8a8_prefix * sdt_w8a8_pre(const struct ggml_tensor * t) {
	return (const struct sdt_w8a8_prefix *) t;
}

// sdt_w8a8_quantize_op quantizes every row of the F32 activation t[0]
// (contiguous [K, ...]) into dst [K+4, ...]; the threads take blocks of rows as they ask.
static void sdt_w8a8_quantize_op(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
	struct sdt_w8a8_args * a = (struct sdt_w8a8_args *) userdata;
	const struct sdt_w8a8_prefix * xp = sdt_w8a8_pre(a->t[0]);
	const int64_t rows = xp->ne[1] * xp->ne[2] * xp->ne[3];
	if (a->levels != 0 && a->levels != 127) {
		sdt_w8a8_quantize_rows_lv((const float *) ggml_get_data(a->t[0]), (int8_t *) ggml_get_data(dst), xp->ne[0], rows,
			a->group, a->levels, ith, nth, &a->sched);
		return;
	}
	sdt_w8a8_quantize_rows((const float *) ggml_get_data(a->t[0]), (int8_t *) ggml_get_data(dst), xp->ne[0], rows,
		a->group, ith, nth, &a->sched);
}

// sdt_w8a8_matmul_op computes dst [N, ...] from t[0] the I8 weight [K, N],
// t[1] the quantized activation [K+4, ...], t[2] the F32 weight scales [N]
// and, when not NULL, t[3] the F32 bias [N].
static void sdt_w8a8_matmul_op(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
	struct sdt_w8a8_args * a = (struct sdt_w8a8_args *) userdata;
	const struct sdt_w8a8_prefix * wp = sdt_w8a8_pre(a->t[0]);
	const struct sdt_w8a8_prefix * xp = sdt_w8a8_pre(a->t[1]);
	const int64_t k = wp->ne[0], n = wp->ne[1];
	const int64_t rows = xp->ne[1] * xp->ne[2] * xp->ne[3];
	sdt_w8a8_matmul((const int8_t *) ggml_get_data(a->t[0]), (const int8_t *) ggml_get_data(a->t[1]),
		(const float *) ggml_get_data(a->t[2]), a->t[3] ? (const float *) ggml_get_data(a->t[3]) : NULL,
		(float *) ggml_get_data(dst), k, n, rows, ith, nth, &a->sched);
}

static struct ggml_tensor * sdt_w8a8_quantize(struct ggml_context * ctx, struct sdt_w8a8_args * a) {
	const struct sdt_w8a8_prefix * xp = sdt_w8a8_pre(a->t[0]);
	return ggml_custom_4d(ctx, SDT_GGML_TYPE_I8, xp->ne[0] + 4, xp->ne[1], xp->ne[2], xp->ne[3], a->t, 1,
		sdt_w8a8_quantize_op, -1, a);
}

static struct ggml_tensor * sdt_w8a8_mul(struct ggml_context * ctx, struct sdt_w8a8_args * a) {
	const struct sdt_w8a8_prefix * wp = sdt_w8a8_pre(a->t[0]);
	const struct sdt_w8a8_prefix * xp = sdt_w8a8_pre(a->t[1]);
	return ggml_custom_4d(ctx, 0, wp->ne[1], xp->ne[1], xp->ne[2], xp->ne[3], a->t, a->t[3] ? 4 : 3,
		sdt_w8a8_matmul_op, -1, a);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

// QuantizeActivations returns the W8A8 activation of the F32 x [K, ...]
// (contiguous): an I8 tensor [K+4, ...] whose rows hold each input row's
// INT8 codes followed by its F32 scale (little-endian). With group > 0 each
// run of group values is first rotated by the Hadamard transform of
// convrot, computed as stable-diffusion.cpp computes it (the row
// scaled by 1/√group, then unnormalised 4-point butterflies), so that the
// codes match its runtime; then scale = absmax/127 and code =
// clamp(roundHalfEven(v/scale), -127, 127), all zeros for a zero row. One
// quantized activation serves every product that reads x (MulMatI8).
func (c *Context) QuantizeActivations(x Tensor, group int) Tensor {
	return c.quantizeActivations(x, group, 0)
}

// quantizeActivations builds the quantization op; levels 0 means 127.
func (c *Context) quantizeActivations(x Tensor, group, levels int) Tensor {
	ne := x.Ne()
	if x.Type() != formats.F32 || !x.contiguous() {
		shapeErr("w8a8 activations: %s tensor %v (want contiguous f32)", x.Type(), ne)
	}
	if group < 0 || group > MaxW8A8Group || (group > 0 && (ne[0]%int64(group) != 0 || !powerOfFour(group))) {
		shapeErr("w8a8 activations: group %d for rows of %d (want 0, or a power of 4 up to %d dividing the row)", group, ne[0], MaxW8A8Group)
	}
	a := c.w8a8Args()
	a.t[0], a.group, a.levels = x.p, C.int(group), C.int(levels)
	return c.op(C.sdt_w8a8_quantize(c.c, a))
}

// QuantizeActivationsLevels is QuantizeActivations with codes in ±levels
// and scale absmax/levels: 127 is QuantizeActivations; 7 is the int4
// activation ComfyUI's convrot_w4a4 kernel computes (its products of int4
// codes are exact in the INT8 product). Other ranges than 127 run the
// plain C row quantizer.
func (c *Context) QuantizeActivationsLevels(x Tensor, group, levels int) Tensor {
	if levels < 1 || levels > 127 {
		shapeErr("w8a8 activations: %d levels (want 1 to 127)", levels)
	}
	return c.quantizeActivations(x, group, levels)
}

// MulMatI8 returns the W8A8 product of the I8 weight w [K, N] (PyTorch's
// [N, K]) and a quantized activation xq [K+4, ...] (QuantizeActivations):
// an F32 [N, ...] whose element is float(Σ q_x·q_w)·scale_x·scale[n] +
// bias[n], the INT32 dot product rescaled as stable-diffusion.cpp does.
// scale is F32 [N]; bias is F32 [N] or the zero Tensor. Threads split the
// output into blocks of rows and weight rows.
func (c *Context) MulMatI8(w, xq, scale, bias Tensor) Tensor {
	wn, xn := w.Ne(), xq.Ne()
	if w.Type() != formats.I8 || xq.Type() != formats.I8 || wn[2] != 1 || wn[3] != 1 || xn[0] != wn[0]+4 ||
		!w.contiguous() || !xq.contiguous() {
		shapeErr("w8a8 product: weight %s %v and activation %s %v do not fit", w.Type(), wn, xq.Type(), xn)
	}
	if scale.Type() != formats.F32 || scale.Elements() != wn[1] || !scale.contiguous() {
		shapeErr("w8a8 product: scale %s %v for %d rows", scale.Type(), scale.Ne(), wn[1])
	}
	a := c.w8a8Args()
	a.t[0], a.t[1], a.t[2] = w.p, xq.p, scale.p
	if bias.Valid() {
		if bias.Type() != formats.F32 || bias.Elements() != wn[1] || !bias.contiguous() {
			shapeErr("w8a8 product: bias %s %v for %d rows", bias.Type(), bias.Ne(), wn[1])
		}
		a.t[3] = bias.p
	}
	return c.op(C.sdt_w8a8_mul(c.c, a))
}

// The C side's bound is MaxW8A8Group; this fails to compile when they differ.
const _ = uint(MaxW8A8Group-C.SDT_W8A8_MAX_GROUP) + uint(C.SDT_W8A8_MAX_GROUP-MaxW8A8Group)

func powerOfFour(g int) bool {
	for g > 1 && g%4 == 0 {
		g /= 4
	}
	return g == 1
}

func (t Tensor) contiguous() bool { return bool(C.ggml_is_contiguous(t.p)) }

// Contiguous reports whether t's elements are stored densely in order
// (QuantizeActivations needs it; Cont makes a contiguous copy).
func (t Tensor) Contiguous() bool { return t.contiguous() }

// Data reads the raw bytes of a contiguous, allocated tensor of any type.
func (t Tensor) Data() ([]byte, error) {
	if !t.allocated() {
		return nil, errors.New("ggml: tensor read before its buffer was allocated")
	}
	if !t.contiguous() {
		return nil, errors.New("ggml: Data of a non-contiguous tensor")
	}
	out := make([]byte, t.Bytes())
	if len(out) > 0 {
		C.sdt_w8a8_get(t.p, unsafe.Pointer(&out[0]), C.size_t(len(out)))
	}
	return out, nil
}

// W8A8Kernel names the W8A8 kernels in use ("avx512vnni", "avxvnni" or
// "avx2" where the CPU has them, else "generic"), for benchmarks and -v logs.
func W8A8Kernel() string { return C.GoString(C.sdt_w8a8_kernel()) }

// w8a8BuiltAVXVNNI reports whether the C compiler had AVX-VNNI's
// intrinsics, without which the "avxvnni" kernels are left out.
const w8a8BuiltAVXVNNI = C.SDT_W8A8_BUILT_AVXVNNI == 1

// w8a8Levels returns the kernel sets this CPU runs, plain C first and the
// best last; tests run each against the Go reference on one machine.
func w8a8Levels() []int {
	var levels []int
	for l := range int(C.SDT_W8A8_LEVELS) {
		if C.sdt_w8a8_has_level(C.int(l)) != 0 {
			levels = append(levels, l)
		}
	}
	return levels
}

// UseW8A8Kernel switches the W8A8 ops to the kernel set called name (a
// W8A8Kernel name this CPU runs), so that a benchmark can measure a
// smaller CPU's kernels on this one; call it between graph computations.
func UseW8A8Kernel(name string) error {
	was := useW8A8Level(0)
	var names []string
	for _, l := range w8a8Levels() {
		useW8A8Level(l)
		if W8A8Kernel() == name {
			return nil
		}
		names = append(names, W8A8Kernel())
	}
	useW8A8Level(was)
	return fmt.Errorf("w8a8: no kernel %q on this CPU (it runs %s)", name, strings.Join(names, ", "))
}

// useW8A8Level switches the W8A8 ops to kernel set l (an entry of
// w8a8Levels) and returns the set in use before.
func useW8A8Level(l int) int { return int(C.sdt_w8a8_use_level(C.int(l))) }

// w8a8Args allocates an op's arguments in C memory, freed with c.
func (c *Context) w8a8Args() *C.struct_sdt_w8a8_args {
	a := (*C.struct_sdt_w8a8_args)(C.calloc(1, C.sizeof_struct_sdt_w8a8_args))
	if a == nil {
		panic(ErrContextFull) // out of C memory: fail the graph, not the process
	}
	// ggml reads the arguments while computing a graph of c, which ends
	// before c becomes unreachable (graphs are computed while their context lives).
	runtime.AddCleanup(c, func(p unsafe.Pointer) { C.free(p) }, unsafe.Pointer(a))
	return a
}

//go:build cgo

package native

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

// Declarations of the part of ggml's graph API that inference uses. The
// structs are opaque except ggml_tensor, whose leading fields are read
// through sdt_tensor_prefix (the layout ggml.h documents for its first
// members); everything else goes through ggml's functions.
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_backend;
struct ggml_backend_buffer;
struct ggml_backend_buffer_type;
struct ggml_gallocr;

struct sdt_init_params {
	size_t mem_size;
	void * mem_buffer;
	bool no_alloc;
};
struct sdt_tensor_prefix {
	int type;
	struct ggml_backend_buffer * buffer;
	int64_t ne[4];
	size_t nb[4];
};

struct ggml_context * ggml_init(struct sdt_init_params params);
void ggml_free(struct ggml_context * ctx);
size_t ggml_tensor_overhead(void);
size_t ggml_graph_overhead_custom(size_t size, bool grads);
struct ggml_tensor * ggml_new_tensor_1d(struct ggml_context * ctx, int type, int64_t ne0);
struct ggml_tensor * ggml_new_tensor_2d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1);
struct ggml_tensor * ggml_new_tensor_3d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2);
struct ggml_tensor * ggml_new_tensor_4d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
struct ggml_tensor * ggml_set_name(struct ggml_tensor * t, const char * name);
void ggml_set_input(struct ggml_tensor * t);
void ggml_set_output(struct ggml_tensor * t);
size_t ggml_nbytes(const struct ggml_tensor * t);
int64_t ggml_nelements(const struct ggml_tensor * t);
bool ggml_is_contiguous(const struct ggml_tensor * t);

struct ggml_tensor * ggml_add(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_sub(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_mul(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_mul_mat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_scale(struct ggml_context * ctx, struct ggml_tensor * a, float s);
struct ggml_tensor * ggml_scale_bias(struct ggml_context * ctx, struct ggml_tensor * a, float s, float b);
struct ggml_tensor * ggml_pad(struct ggml_context * ctx, struct ggml_tensor * a, int p0, int p1, int p2, int p3);
struct ggml_tensor * ggml_clamp(struct ggml_context * ctx, struct ggml_tensor * a, float lo, float hi);
struct ggml_tensor * ggml_silu(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_gelu(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_gelu_quick(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_norm(struct ggml_context * ctx, struct ggml_tensor * a, float eps);
struct ggml_tensor * ggml_rms_norm(struct ggml_context * ctx, struct ggml_tensor * a, float eps);
struct ggml_tensor * ggml_group_norm(struct ggml_context * ctx, struct ggml_tensor * a, int n_groups, float eps);
struct ggml_tensor * ggml_soft_max_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * mask, float scale, float max_bias);
struct ggml_tensor * ggml_diag_mask_inf(struct ggml_context * ctx, struct ggml_tensor * a, int n_past);
struct ggml_tensor * ggml_conv_2d(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, int s0, int s1, int p0, int p1, int d0, int d1);
struct ggml_tensor * ggml_upscale(struct ggml_context * ctx, struct ggml_tensor * a, int scale_factor, int mode);
struct ggml_tensor * ggml_timestep_embedding(struct ggml_context * ctx, struct ggml_tensor * timesteps, int dim, int max_period);
struct ggml_tensor * ggml_concat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, int dim);
struct ggml_tensor * ggml_cont(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_cast(struct ggml_context * ctx, struct ggml_tensor * a, int type);
struct ggml_tensor * ggml_permute(struct ggml_context * ctx, struct ggml_tensor * a, int ax0, int ax1, int ax2, int ax3);
struct ggml_tensor * ggml_reshape_1d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0);
struct ggml_tensor * ggml_reshape_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1);
struct ggml_tensor * ggml_reshape_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2);
struct ggml_tensor * ggml_reshape_4d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
struct ggml_tensor * ggml_view_4d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset);
struct ggml_tensor * ggml_get_rows(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);

struct ggml_cgraph * ggml_new_graph_custom(struct ggml_context * ctx, size_t size, bool grads);
void ggml_build_forward_expand(struct ggml_cgraph * g, struct ggml_tensor * t);
int ggml_graph_n_nodes(struct ggml_cgraph * g);

struct ggml_backend * ggml_backend_cpu_init(void);
void ggml_backend_cpu_set_n_threads(struct ggml_backend * b, int n);
void ggml_backend_free(struct ggml_backend * b);
struct ggml_backend_buffer_type * ggml_backend_get_default_buffer_type(struct ggml_backend * b);
int ggml_backend_graph_compute(struct ggml_backend * b, struct ggml_cgraph * g);
struct ggml_backend_buffer * ggml_backend_alloc_ctx_tensors(struct ggml_context * ctx, struct ggml_backend * b);
void ggml_backend_buffer_free(struct ggml_backend_buffer * buf);
size_t ggml_backend_buffer_get_size(struct ggml_backend_buffer * buf);
void ggml_backend_tensor_set(struct ggml_tensor * t, const void * data, size_t offset, size_t size);
void ggml_backend_tensor_get(const struct ggml_tensor * t, void * data, size_t offset, size_t size);

struct ggml_gallocr * ggml_gallocr_new(struct ggml_backend_buffer_type * buft);
void ggml_gallocr_free(struct ggml_gallocr * a);
bool ggml_gallocr_alloc_graph(struct ggml_gallocr * a, struct ggml_cgraph * g);
size_t ggml_gallocr_get_buffer_size(struct ggml_gallocr * a, int buffer_id);

typedef bool (*sdt_abort_callback)(void * data);
void ggml_backend_cpu_set_abort_callback(struct ggml_backend * b, sdt_abort_callback cb, void * data);

// ggml's CPU backend asks the callback before every node (on its first
// thread); the flag is C memory that Backend.Abort sets from any goroutine.
static bool sdt_abort_requested(void * flag) { return __atomic_load_n((int *) flag, __ATOMIC_RELAXED) != 0; }
static void sdt_set_abort(int * flag, int v) { __atomic_store_n(flag, v, __ATOMIC_RELAXED); }
static void sdt_watch_abort(struct ggml_backend * b, int * flag) { ggml_backend_cpu_set_abort_callback(b, sdt_abort_requested, flag); }

int ggml_cpu_has_avx2(void);
int ggml_cpu_has_fma(void);
int ggml_cpu_has_f16c(void);

static struct ggml_context * sdt_init(size_t size) {
	struct sdt_init_params p = { size, NULL, true };
	return ggml_init(p);
}
static const struct sdt_tensor_prefix * sdt_prefix(const struct ggml_tensor * t) {
	return (const struct sdt_tensor_prefix *) t;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

// A Context holds ggml tensor and graph descriptors (never their data,
// which lives in backend buffers): weights in one context allocated once,
// each graph in a context of its own that is freed after computing.
type Context struct {
	c    *C.struct_ggml_context
	left int // descriptors that still fit
}

// Tensor is a ggml tensor descriptor in some Context; its zero value is no tensor.
type Tensor struct {
	p *C.struct_ggml_tensor
}

// NewContext makes a no-alloc context with room for n tensor descriptors
// and, when graphSize > 0, one graph of that many nodes.
func NewContext(n, graphSize int) (*Context, error) {
	if n <= 0 {
		return nil, fmt.Errorf("ggml: context for %d tensors", n)
	}
	size := C.size_t(n) * C.ggml_tensor_overhead()
	if graphSize > 0 {
		size += C.ggml_graph_overhead_custom(C.size_t(graphSize), false)
	}
	c := C.sdt_init(size + 1024)
	if c == nil {
		return nil, errors.New("ggml: ggml_init failed")
	}
	return &Context{c: c, left: n}, nil
}

// Free releases the context's descriptors (not backend buffers).
func (c *Context) Free() {
	if c != nil && c.c != nil {
		C.ggml_free(c.c)
		c.c = nil
	}
}

// Remaining returns how many more descriptors fit in the context.
func (c *Context) Remaining() int { return c.left }

// take reserves one descriptor; ggml aborts the process when a context
// overflows, so every op checks first and panics with ErrContextFull,
// which graph builders recover into an error.
func (c *Context) take() {
	if c.left <= 0 {
		panic(ErrContextFull)
	}
	c.left--
}

// NewTensor creates a tensor of type t with ggml dims ne (innermost first, 1 to 4 of them).
func (c *Context) NewTensor(t formats.DType, ne ...int64) (Tensor, error) {
	if !t.InLinkedGGML() {
		return Tensor{}, fmt.Errorf("ggml: type %s is not in the linked ggml", t)
	}
	if len(ne) == 0 || len(ne) > 4 {
		return Tensor{}, fmt.Errorf("ggml: %d dims, want 1 to 4", len(ne))
	}
	for _, d := range ne {
		if d <= 0 {
			return Tensor{}, fmt.Errorf("ggml: dims %v must be positive", ne)
		}
	}
	if bs := t.Info().BlockSize; ne[0]%int64(bs) != 0 {
		return Tensor{}, fmt.Errorf("ggml: row of %d elements is not a whole number of %s blocks of %d", ne[0], t, bs)
	}
	if c.left <= 0 {
		return Tensor{}, ErrContextFull
	}
	c.left--
	var p *C.struct_ggml_tensor
	switch len(ne) {
	case 1:
		p = C.ggml_new_tensor_1d(c.c, C.int(t), C.int64_t(ne[0]))
	case 2:
		p = C.ggml_new_tensor_2d(c.c, C.int(t), C.int64_t(ne[0]), C.int64_t(ne[1]))
	case 3:
		p = C.ggml_new_tensor_3d(c.c, C.int(t), C.int64_t(ne[0]), C.int64_t(ne[1]), C.int64_t(ne[2]))
	default:
		p = C.ggml_new_tensor_4d(c.c, C.int(t), C.int64_t(ne[0]), C.int64_t(ne[1]), C.int64_t(ne[2]), C.int64_t(ne[3]))
	}
	return Tensor{p}, nil
}

// Valid reports whether t refers to a tensor.
func (t Tensor) Valid() bool { return t.p != nil }

// Ne returns the four ggml dims (innermost first).
func (t Tensor) Ne() [4]int64 {
	pr := C.sdt_prefix(t.p)
	return [4]int64{int64(pr.ne[0]), int64(pr.ne[1]), int64(pr.ne[2]), int64(pr.ne[3])}
}

// Nb returns the four byte strides.
func (t Tensor) Nb() [4]int64 {
	pr := C.sdt_prefix(t.p)
	return [4]int64{int64(pr.nb[0]), int64(pr.nb[1]), int64(pr.nb[2]), int64(pr.nb[3])}
}

// Type returns the element type.
func (t Tensor) Type() formats.DType { return formats.DType(C.sdt_prefix(t.p)._type) }

// Bytes returns the size of the tensor's data.
func (t Tensor) Bytes() int64 { return int64(C.ggml_nbytes(t.p)) }

// Elements returns the number of elements.
func (t Tensor) Elements() int64 { return int64(C.ggml_nelements(t.p)) }

// SetName names the tensor (ggml keeps at most 63 bytes).
func (t Tensor) SetName(name string) Tensor {
	cs := C.CString(name)
	C.ggml_set_name(t.p, cs)
	C.free(unsafe.Pointer(cs))
	return t
}

// SetInput marks t as a graph input, so the allocator places it before any
// computed tensor and the caller can fill it after allocation.
func (t Tensor) SetInput() Tensor { C.ggml_set_input(t.p); return t }

// SetOutput marks t as a graph output, so the allocator never reuses its memory.
func (t Tensor) SetOutput() Tensor { C.ggml_set_output(t.p); return t }

// allocated reports whether the tensor has a backend buffer.
func (t Tensor) allocated() bool { return C.sdt_prefix(t.p).buffer != nil }

// SetData copies data (exactly Bytes() long) into the tensor's buffer.
func (t Tensor) SetData(data []byte) error {
	if !t.allocated() {
		return errors.New("ggml: tensor set before its buffer was allocated")
	}
	if int64(len(data)) != t.Bytes() {
		return fmt.Errorf("ggml: %d bytes for a tensor of %d", len(data), t.Bytes())
	}
	if len(data) > 0 {
		C.ggml_backend_tensor_set(t.p, unsafe.Pointer(&data[0]), 0, C.size_t(len(data)))
	}
	return nil
}

// SetDataAt copies data into the tensor's buffer at byte offset off, so
// that a large tensor can be filled piece by piece from a small buffer.
func (t Tensor) SetDataAt(data []byte, off int64) error {
	if !t.allocated() {
		return errors.New("ggml: tensor set before its buffer was allocated")
	}
	if off < 0 || off+int64(len(data)) > t.Bytes() {
		return fmt.Errorf("ggml: %d bytes at offset %d for a tensor of %d", len(data), off, t.Bytes())
	}
	if len(data) > 0 {
		C.ggml_backend_tensor_set(t.p, unsafe.Pointer(&data[0]), C.size_t(off), C.size_t(len(data)))
	}
	return nil
}

// SetF32 copies floats into an F32 tensor.
func (t Tensor) SetF32(v []float32) error {
	if t.Type() != formats.F32 {
		return fmt.Errorf("ggml: SetF32 on a %s tensor", t.Type())
	}
	if len(v) == 0 {
		return t.SetData(nil)
	}
	return t.SetData(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
}

// SetI32 copies integers into an I32 tensor.
func (t Tensor) SetI32(v []int32) error {
	if t.Type() != formats.I32 {
		return fmt.Errorf("ggml: SetI32 on a %s tensor", t.Type())
	}
	if len(v) == 0 {
		return t.SetData(nil)
	}
	return t.SetData(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
}

// F32 reads a contiguous F32 tensor's data.
func (t Tensor) F32() ([]float32, error) {
	if t.Type() != formats.F32 {
		return nil, fmt.Errorf("ggml: F32 of a %s tensor", t.Type())
	}
	if !t.allocated() {
		return nil, errors.New("ggml: tensor read before its buffer was allocated")
	}
	if !bool(C.ggml_is_contiguous(t.p)) {
		return nil, errors.New("ggml: F32 of a non-contiguous tensor")
	}
	out := make([]float32, t.Elements())
	if len(out) > 0 {
		C.ggml_backend_tensor_get(t.p, unsafe.Pointer(&out[0]), 0, C.size_t(4*len(out)))
	}
	return out, nil
}

// Ops. Each returns a new descriptor in c. Shapes are checked where ggml
// would abort on a mismatch, with a panic that BuildGraph recovers.

func (c *Context) op(p *C.struct_ggml_tensor) Tensor {
	c.take()
	return Tensor{p}
}

// canRepeat reports whether b broadcasts into a (each dim of a a multiple of b's).
func canRepeat(b, a Tensor) bool {
	na, nb := a.Ne(), b.Ne()
	for i := range 4 {
		if nb[i] == 0 || na[i]%nb[i] != 0 {
			return false
		}
	}
	return true
}

func (c *Context) binary(name string, a, b Tensor) {
	if !canRepeat(b, a) {
		shapeErr("%s: %v does not broadcast into %v", name, b.Ne(), a.Ne())
	}
	// ggml's CPU binary ops take an F32 second operand, or one of the first's type.
	if tb := b.Type(); tb != formats.F32 && tb != a.Type() {
		shapeErr("%s: %s operand with a %s one", name, tb, a.Type())
	}
}

// Add returns a+b, b broadcast over a.
func (c *Context) Add(a, b Tensor) Tensor {
	c.binary("add", a, b)
	return c.op(C.ggml_add(c.c, a.p, b.p))
}

// Sub returns a-b, b broadcast over a.
func (c *Context) Sub(a, b Tensor) Tensor {
	c.binary("sub", a, b)
	return c.op(C.ggml_sub(c.c, a.p, b.p))
}

// Mul returns a*b elementwise, b broadcast over a.
func (c *Context) Mul(a, b Tensor) Tensor {
	c.binary("mul", a, b)
	return c.op(C.ggml_mul(c.c, a.p, b.p))
}

// MulMat returns a·bᵀ in ggml's sense: a [K, M, ...], b [K, N, ...] gives
// [M, N, ...]; a (the weight) may be quantized, b is F32.
func (c *Context) MulMat(a, b Tensor) Tensor {
	na, nb := a.Ne(), b.Ne()
	if na[0] != nb[0] || nb[2]%na[2] != 0 || nb[3]%na[3] != 0 {
		shapeErr("mul_mat: %v and %v", na, nb)
	}
	if t, ok := c.mulMatQ6K(a, b); ok && q6KAsSDCPP { // sd-cli's ggml sums q6_K products otherwise (ops_kquant.go)
		return t
	}
	return c.op(C.ggml_mul_mat(c.c, a.p, b.p))
}

// Scale returns a*s.
func (c *Context) Scale(a Tensor, s float32) Tensor {
	return c.op(C.ggml_scale(c.c, a.p, C.float(s)))
}

// ScaleBias returns a*s + b.
func (c *Context) ScaleBias(a Tensor, s, b float32) Tensor {
	return c.op(C.ggml_scale_bias(c.c, a.p, C.float(s), C.float(b)))
}

// PadEnd appends p0 zeros to dim 0 and p1 to dim 1.
func (c *Context) PadEnd(a Tensor, p0, p1 int) Tensor {
	if p0 < 0 || p1 < 0 {
		shapeErr("pad: %d, %d", p0, p1)
	}
	return c.op(C.ggml_pad(c.c, a.p, C.int(p0), C.int(p1), 0, 0))
}

// Clamp limits a to [lo, hi].
func (c *Context) Clamp(a Tensor, lo, hi float32) Tensor {
	return c.op(C.ggml_clamp(c.c, a.p, C.float(lo), C.float(hi)))
}

// SiLU returns x·sigmoid(x).
func (c *Context) SiLU(a Tensor) Tensor { return c.op(C.ggml_silu(c.c, a.p)) }

// GELU returns ggml's GELU (the tanh approximation, as PyTorch's
// approximate="tanh"; close to the erf form within about 1e-3).
func (c *Context) GELU(a Tensor) Tensor { return c.op(C.ggml_gelu(c.c, a.p)) }

// GELUQuick returns x·sigmoid(1.702x), CLIP's quick_gelu.
func (c *Context) GELUQuick(a Tensor) Tensor { return c.op(C.ggml_gelu_quick(c.c, a.p)) }

// Norm normalizes each row (ne0) to zero mean and unit variance.
func (c *Context) Norm(a Tensor, eps float32) Tensor {
	return c.op(C.ggml_norm(c.c, a.p, C.float(eps)))
}

// RMSNorm divides each row (ne0) by its root mean square, sqrt(mean(x²)+eps)
// (T5's layer norm and Flux's QK norm, without their scale).
func (c *Context) RMSNorm(a Tensor, eps float32) Tensor {
	return c.op(C.ggml_rms_norm(c.c, a.p, C.float(eps)))
}

// GroupNorm normalizes a [W, H, C, N] over groups of C/groups channels.
func (c *Context) GroupNorm(a Tensor, groups int, eps float32) Tensor {
	if ch := a.Ne()[2]; groups <= 0 || ch%int64(groups) != 0 {
		shapeErr("group_norm: %d channels in %d groups", ch, groups)
	}
	return c.op(C.ggml_group_norm(c.c, a.p, C.int(groups), C.float(eps)))
}

// SoftMax returns softmax(a*scale) along ne0.
func (c *Context) SoftMax(a Tensor, scale float32) Tensor {
	return c.op(C.ggml_soft_max_ext(c.c, a.p, nil, C.float(scale), 0))
}

// DiagMaskInf sets the elements above the diagonal (column > row + nPast) to -Inf.
func (c *Context) DiagMaskInf(a Tensor, nPast int) Tensor {
	return c.op(C.ggml_diag_mask_inf(c.c, a.p, C.int(nPast)))
}

// Conv2D convolves x [W, H, IC, N] with kernel k [KW, KH, IC, OC] (F16 or
// F32; ggml's im2col uses the kernel's type for the unfolded input).
func (c *Context) Conv2D(k, x Tensor, stride, pad int) Tensor {
	nk, nx := k.Ne(), x.Ne()
	if nk[2] != nx[2] {
		shapeErr("conv_2d: kernel %v on input %v", nk, nx)
	}
	if t := k.Type(); t != formats.F16 && t != formats.F32 {
		shapeErr("conv_2d: kernel of type %s (want f16 or f32)", t)
	}
	if stride <= 0 || nx[0]+2*int64(pad) < nk[0] || nx[1]+2*int64(pad) < nk[1] {
		shapeErr("conv_2d: kernel %v stride %d pad %d on input %v", nk, stride, pad, nx)
	}
	// im2col, reshapes, mul_mat, permute and cont: seven descriptors.
	for range 6 {
		c.take()
	}
	return c.op(C.ggml_conv_2d(c.c, k.p, x.p, C.int(stride), C.int(stride), C.int(pad), C.int(pad), 1, 1))
}

// UpscaleNearest repeats every element of dims 0 and 1 factor times.
func (c *Context) UpscaleNearest(a Tensor, factor int) Tensor {
	return c.op(C.ggml_upscale(c.c, a.p, C.int(factor), 0))
}

// TimestepEmbedding returns the sinusoidal embedding [dim, N] of timesteps
// (F32 [N]): cos of t·f_j in the first half and sin in the second, f_j =
// maxPeriod^(-j/(dim/2)), as LDM's timestep_embedding (flip_sin_to_cos).
func (c *Context) TimestepEmbedding(t Tensor, dim, maxPeriod int) Tensor {
	return c.op(C.ggml_timestep_embedding(c.c, t.p, C.int(dim), C.int(maxPeriod)))
}

// Concat joins a and b along dim.
func (c *Context) Concat(a, b Tensor, dim int) Tensor {
	na, nb := a.Ne(), b.Ne()
	for i := range 4 {
		if i != dim && na[i] != nb[i] {
			shapeErr("concat along %d: %v and %v", dim, na, nb)
		}
	}
	return c.op(C.ggml_concat(c.c, a.p, b.p, C.int(dim)))
}

// Cont makes a contiguous copy of a (after a permute).
func (c *Context) Cont(a Tensor) Tensor { return c.op(C.ggml_cont(c.c, a.p)) }

// Cast converts a to type t.
func (c *Context) Cast(a Tensor, t formats.DType) Tensor {
	return c.op(C.ggml_cast(c.c, a.p, C.int(t)))
}

// Permute moves dim i of a to position axes[i].
func (c *Context) Permute(a Tensor, ax0, ax1, ax2, ax3 int) Tensor {
	seen := [4]bool{}
	for _, x := range []int{ax0, ax1, ax2, ax3} {
		if x < 0 || x > 3 || seen[x] {
			shapeErr("permute: axes %d %d %d %d", ax0, ax1, ax2, ax3)
		}
		seen[x] = true
	}
	return c.op(C.ggml_permute(c.c, a.p, C.int(ax0), C.int(ax1), C.int(ax2), C.int(ax3)))
}

// Reshape views a contiguous a with dims ne (1 to 4, same element count).
func (c *Context) Reshape(a Tensor, ne ...int64) Tensor {
	n := int64(1)
	for _, d := range ne {
		n *= d
	}
	if len(ne) == 0 || len(ne) > 4 || n != a.Elements() {
		shapeErr("reshape %v to %v", a.Ne(), ne)
	}
	if !bool(C.ggml_is_contiguous(a.p)) {
		a = c.Cont(a)
	}
	switch len(ne) {
	case 1:
		return c.op(C.ggml_reshape_1d(c.c, a.p, C.int64_t(ne[0])))
	case 2:
		return c.op(C.ggml_reshape_2d(c.c, a.p, C.int64_t(ne[0]), C.int64_t(ne[1])))
	case 3:
		return c.op(C.ggml_reshape_3d(c.c, a.p, C.int64_t(ne[0]), C.int64_t(ne[1]), C.int64_t(ne[2])))
	}
	return c.op(C.ggml_reshape_4d(c.c, a.p, C.int64_t(ne[0]), C.int64_t(ne[1]), C.int64_t(ne[2]), C.int64_t(ne[3])))
}

// View returns a view of a with dims ne, byte strides nb1..nb3 and a byte offset.
func (c *Context) View(a Tensor, ne [4]int64, nb1, nb2, nb3, offset int64) Tensor {
	last := offset + (ne[0]-1)*a.Nb()[0] + (ne[1]-1)*nb1 + (ne[2]-1)*nb2 + (ne[3]-1)*nb3
	if offset < 0 || last >= a.Bytes() {
		shapeErr("view %v at %d outside %v", ne, offset, a.Ne())
	}
	return c.op(C.ggml_view_4d(c.c, a.p, C.int64_t(ne[0]), C.int64_t(ne[1]), C.int64_t(ne[2]), C.int64_t(ne[3]),
		C.size_t(nb1), C.size_t(nb2), C.size_t(nb3), C.size_t(offset)))
}

// GetRows gathers the rows of a named by the I32 indices idx.
func (c *Context) GetRows(a, idx Tensor) Tensor {
	if idx.Type() != formats.I32 {
		shapeErr("get_rows: indices of type %s", idx.Type())
	}
	return c.op(C.ggml_get_rows(c.c, a.p, idx.p))
}

// Graph is a computation graph built in a Context.
type Graph struct {
	g   *C.struct_ggml_cgraph
	ctx *Context
}

// NewGraph creates a graph of at most size nodes in c (c must have been
// made with that graph size).
func (c *Context) NewGraph(size int) *Graph {
	return &Graph{g: C.ggml_new_graph_custom(c.c, C.size_t(size), false), ctx: c}
}

// Expand adds t and everything it depends on to the graph.
func (g *Graph) Expand(t Tensor) { C.ggml_build_forward_expand(g.g, t.p) }

// Nodes returns the number of computed nodes.
func (g *Graph) Nodes() int { return int(C.ggml_graph_n_nodes(g.g)) }

// Backend is ggml's CPU backend with a thread count.
type Backend struct {
	b       *C.struct_ggml_backend
	threads int
	abort   *C.int // C memory: ggml's abort callback reads it
}

// NewCPUBackend starts ggml's CPU backend with n threads (n <= 0: all cores).
func NewCPUBackend(n int) (*Backend, error) {
	alignGELU()
	b := C.ggml_backend_cpu_init()
	if b == nil {
		return nil, errors.New("ggml: CPU backend failed to start")
	}
	be := &Backend{b: b, abort: (*C.int)(C.calloc(1, C.size_t(unsafe.Sizeof(C.int(0)))))}
	C.sdt_watch_abort(b, be.abort)
	be.SetThreads(n)
	return be, nil
}

// Abort makes the Compute under way (or the next one) stop after the node
// it is computing and return ErrAborted, so that an interrupt takes effect
// within one node rather than one whole graph. It may be called from any
// goroutine while the backend is not being freed; ResetAbort undoes it.
func (b *Backend) Abort() { C.sdt_set_abort(b.abort, 1) }

// ResetAbort lets graphs compute again after Abort.
func (b *Backend) ResetAbort() { C.sdt_set_abort(b.abort, 0) }

// SetThreads sets the thread count (n <= 0: all cores).
func (b *Backend) SetThreads(n int) {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	b.threads = n
	C.ggml_backend_cpu_set_n_threads(b.b, C.int(n))
}

// Threads returns the thread count.
func (b *Backend) Threads() int { return b.threads }

// Free stops the backend.
func (b *Backend) Free() {
	if b != nil && b.b != nil {
		C.ggml_backend_free(b.b)
		b.b = nil
		C.free(unsafe.Pointer(b.abort))
		b.abort = nil
	}
}

// Buffer is backend memory holding the data of a context's tensors.
type Buffer struct {
	p *C.struct_ggml_backend_buffer
}

// AllocContext allocates one buffer for every tensor of ctx.
func (b *Backend) AllocContext(ctx *Context) (*Buffer, error) {
	p := C.ggml_backend_alloc_ctx_tensors(ctx.c, b.b)
	if p == nil {
		return nil, errors.New("ggml: allocating the context's tensors failed")
	}
	return &Buffer{p}, nil
}

// Size returns the buffer's size in bytes.
func (buf *Buffer) Size() int64 { return int64(C.ggml_backend_buffer_get_size(buf.p)) }

// Free releases the buffer.
func (buf *Buffer) Free() {
	if buf != nil && buf.p != nil {
		C.ggml_backend_buffer_free(buf.p)
		buf.p = nil
	}
}

// Allocator places a graph's computed tensors in a reusable compute buffer.
type Allocator struct {
	a *C.struct_ggml_gallocr
}

// NewAllocator makes a graph allocator for the backend's buffer type.
func (b *Backend) NewAllocator() *Allocator {
	return &Allocator{C.ggml_gallocr_new(C.ggml_backend_get_default_buffer_type(b.b))}
}

// Alloc allocates the graph's tensors (growing the buffer when needed).
func (a *Allocator) Alloc(g *Graph) error {
	if !bool(C.ggml_gallocr_alloc_graph(a.a, g.g)) {
		return errors.New("ggml: allocating the compute graph failed")
	}
	return nil
}

// Size returns the compute buffer's size in bytes.
func (a *Allocator) Size() int64 { return int64(C.ggml_gallocr_get_buffer_size(a.a, 0)) }

// Free releases the compute buffer.
func (a *Allocator) Free() {
	if a != nil && a.a != nil {
		C.ggml_gallocr_free(a.a)
		a.a = nil
	}
}

// Compute runs the graph.
func (b *Backend) Compute(g *Graph) error {
	switch st := C.ggml_backend_graph_compute(b.b, g.g); st {
	case 0:
	case 1: // GGML_STATUS_ABORTED
		return ErrAborted
	default:
		return fmt.Errorf("ggml: graph compute failed with status %d", int(st))
	}
	return nil
}

// CPUFeatures reports SIMD features the linked ggml's CPU backend was
// compiled with (ggml reports compile-time flags, not the host's).
func CPUFeatures() (avx2, fma, f16c bool) {
	return C.ggml_cpu_has_avx2() != 0, C.ggml_cpu_has_fma() != 0, C.ggml_cpu_has_f16c() != 0
}

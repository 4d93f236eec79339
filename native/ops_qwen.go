//go:build cgo

package native

/*
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>

// ggml's custom-op entry point (declared here too, so that this addition
// stays in its own file).
struct ggml_context;
struct ggml_tensor;
typedef void (*sdt_dot_op_t)(struct ggml_tensor * dst, int ith, int nth, void * userdata);
struct ggml_tensor * ggml_custom_4d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
	struct ggml_tensor ** args, int n_args, sdt_dot_op_t fun, int n_tasks, void * userdata);
void * ggml_get_data(const struct ggml_tensor * t);

struct sdt_dot_prefix {
	int type;
	void * buffer;
	int64_t ne[4];
	size_t nb[4];
};

// sdt_dot_pair holds the two operands of one product; it lives in C
// memory (ggml keeps only the pointer) and is freed with the Go Context.
struct sdt_dot_pair {
	struct ggml_tensor * t[2];
};

// sdt_dot_f32 is the dot product of n floats summed as ggml_vec_dot_f32
// sums them on x86 with AVX2 and FMA: four 8-lane accumulators take the
// values of each run of 32 by fused multiply-adds; they are added pairwise
// (0+2, 1+3, then the two), the upper four lanes onto the lower, then two
// horizontal adds; the values past the last whole run are added as gcc
// compiles ggml's scalar tail under -march=native (sdt_dot_tail).
// fmaf rounds once, so this gives the same bits on any CPU and build; the
// AVX2 build uses those instructions, any other the same steps in scalars.
// sdt_dot_tail adds the values past the last run of 32 as gcc compiles
// ggml's scalar tail under -O3 -march with its default contraction (sd-cli's
// build, measured against ggml's own kernel built so): products of whole
// groups of four are rounded, then added one by one; the last (n-np)%4
// are fused multiply-adds. volatile keeps a contracting build from fusing
// the first part.
static float sdt_dot_tail(const float * x, const float * y, int64_t np, int64_t n, float sum) {
	const int64_t nf = np + ((n - np) & ~(int64_t) 3);
	for (int64_t i = np; i < nf; i++) {
		const volatile float p = x[i] * y[i];
		sum += p;
	}
	for (int64_t i = nf; i < n; i++) {
		sum = fmaf(x[i], y[i], sum);
	}
	return sum;
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
static float sdt_dot_f32(const float * x, const float * y, int64_t n) {
	__m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
	const int64_t np = n & ~(int64_t) 31;
	for (int64_t i = 0; i < np; i += 32) {
		for (int j = 0; j < 4; j++) {
			acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8*j), _mm256_loadu_ps(y + i + 8*j), acc[j]);
		}
	}
	const __m256 lane = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
	const __m128 half = _mm_add_ps(_mm256_castps256_ps128(lane), _mm256_extractf128_ps(lane, 1));
	const __m128 pair = _mm_hadd_ps(half, half);
	float sum = _mm_cvtss_f32(_mm_hadd_ps(pair, pair));
	return sdt_dot_tail(x, y, np, n, sum);
}
#else
static float sdt_dot_f32(const float * x, const float * y, int64_t n) {
	float acc[4][8] = {{0}};
	const int64_t np = n & ~(int64_t) 31;
	for (int64_t i = 0; i < np; i += 32) {
		for (int j = 0; j < 4; j++) {
			for (int l = 0; l < 8; l++) {
				acc[j][l] = fmaf(x[i + 8*j + l], y[i + 8*j + l], acc[j][l]);
			}
		}
	}
	float lane[8];
	for (int l = 0; l < 8; l++) {
		const float s02 = acc[0][l] + acc[2][l];
		const float s13 = acc[1][l] + acc[3][l];
		lane[l] = s02 + s13;
	}
	float half[4];
	for (int l = 0; l < 4; l++) {
		half[l] = lane[l] + lane[l + 4];
	}
	float sum = (half[0] + half[1]) + (half[2] + half[3]);
	return sdt_dot_tail(x, y, np, n, sum);
}
#endif

// sdt_dot_mul_mat fills dst [M, N, B2, B3] with a [K, M, A2, A3] times
// b [K, N, B2, B3], dst[m, n] = dot(a row m, b row n), a's batches
// broadcast over b's as ggml's mul_mat does (b's batch i2 reads a's
// i2 / (B2/A2)); threads split the rows of b.
static void sdt_dot_mul_mat(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
	const struct sdt_dot_pair * p = (const struct sdt_dot_pair *) userdata;
	const struct sdt_dot_prefix * a = (const struct sdt_dot_prefix *) p->t[0];
	const struct sdt_dot_prefix * b = (const struct sdt_dot_prefix *) p->t[1];
	const struct sdt_dot_prefix * d = (const struct sdt_dot_prefix *) dst;
	const char * ad = (const char *) ggml_get_data(p->t[0]);
	const char * bd = (const char *) ggml_get_data(p->t[1]);
	char * dd = (char *) ggml_get_data(dst);
	const int64_t k = a->ne[0], m = a->ne[1], n = b->ne[1];
	const int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
	const int64_t rows = n * b->ne[2] * b->ne[3];
	const int64_t per = (rows + nth - 1) / nth;
	const int64_t j0 = per * ith, j1 = j0 + per < rows ? j0 + per : rows;
	for (int64_t r = j0; r < j1; r++) {
		const int64_t j = r % n, i2 = (r / n) % b->ne[2], i3 = r / n / b->ne[2];
		const float * y = (const float *) (bd + j * b->nb[1] + i2 * b->nb[2] + i3 * b->nb[3]);
		const char * arow = ad + (i2 / r2) * a->nb[2] + (i3 / r3) * a->nb[3];
		float * out = (float *) (dd + j * d->nb[1] + i2 * d->nb[2] + i3 * d->nb[3]);
		for (int64_t i = 0; i < m; i++) {
			out[i] = sdt_dot_f32((const float *) (arow + i * a->nb[1]), y, k);
		}
	}
}

static struct ggml_tensor * sdt_dot_mul_mat_op(struct ggml_context * ctx, struct sdt_dot_pair * p, int64_t m, int64_t n, int64_t b2, int64_t b3) {
	return ggml_custom_4d(ctx, 0, m, n, b2, b3, p->t, 2, sdt_dot_mul_mat, -1, p);
}

// sdt_rope_args holds a rotary embedding's operands and parameters; like
// sdt_dot_pair it lives in C memory until the Go Context is collected.
struct sdt_rope_args {
	struct ggml_tensor * t[2];
	int dims;
	float base;
};

// sdt_rope_neox_fma fills dst with a [d, heads, L, N] turned by NeoX's
// rotary embedding at positions pos [L] (int32), as ggml computes it with
// its multiply-adds contracted the way gcc contracts them under -march
// with FMA: per position the cos and sin of pos·base^(-2i/dims) (the angle
// multiplied step by step, as ggml's cache does), then for the pair (x0,
// x1) of channels i and i + dims/2, x0·cos − x1·sin with x1·sin rounded
// first and x0·sin + x1·cos with x1·cos rounded first. Channels past dims
// are copied. Threads split the positions.
static void sdt_rope_neox_fma(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
	const struct sdt_rope_args * r = (const struct sdt_rope_args *) userdata;
	const struct sdt_dot_prefix * a = (const struct sdt_dot_prefix *) r->t[0];
	const struct sdt_dot_prefix * d = (const struct sdt_dot_prefix *) dst;
	const char * ad = (const char *) ggml_get_data(r->t[0]);
	const int32_t * pos = (const int32_t *) ggml_get_data(r->t[1]);
	char * dd = (char *) ggml_get_data(dst);
	const int dims = r->dims, half = r->dims / 2;
	const float theta_scale = powf(r->base, -2.0f / (float) dims);
	float cache[1024];
	const int64_t n = a->ne[2] * a->ne[3];
	const int64_t per = (n + nth - 1) / nth;
	const int64_t p0 = per * ith, p1 = p0 + per < n ? p0 + per : n;
	for (int64_t q = p0; q < p1; q++) {
		const int64_t i2 = q % a->ne[2], i3 = q / a->ne[2];
		float theta = (float) pos[i2];
		for (int i0 = 0; i0 < dims; i0 += 2) {
			cache[i0] = cosf(theta);
			cache[i0 + 1] = sinf(theta);
			theta *= theta_scale;
		}
		for (int64_t i1 = 0; i1 < a->ne[1]; i1++) {
			const float * x = (const float *) (ad + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3]);
			float * y = (float *) (dd + i1 * d->nb[1] + i2 * d->nb[2] + i3 * d->nb[3]);
			for (int i0 = 0; i0 < dims; i0 += 2) {
				const float c = cache[i0], s = cache[i0 + 1];
				const float x0 = x[i0 / 2], x1 = x[i0 / 2 + half];
				const float x1s = x1 * s, x1c = x1 * c;
				y[i0 / 2] = fmaf(x0, c, -x1s);
				y[i0 / 2 + half] = fmaf(x0, s, x1c);
			}
			for (int64_t i0 = dims; i0 < a->ne[0]; i0++) {
				y[i0] = x[i0];
			}
		}
	}
}

static struct ggml_tensor * sdt_rope_neox_fma_op(struct ggml_context * ctx, struct sdt_rope_args * r, const int64_t * ne) {
	return ggml_custom_4d(ctx, 0, ne[0], ne[1], ne[2], ne[3], r->t, 2, sdt_rope_neox_fma, -1, r);
}
*/
import "C"

import (
	"runtime"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

// MulMatDotF32 is MulMat for two F32 operands with rows of contiguous
// values, a [K, M, A2, A3] and b [K, N, B2, B3] (a's batches broadcast
// over b's, as in MulMat: grouped-query attention), giving [M, N, B2, B3]
// summed in the order of ggml's CPU dot product on an AVX2 build whose
// compiler contracts its scalar tail (gcc's default under -march, as
// stable-diffusion.cpp's release and native builds are: four products at
// a time rounded, the last one to three fused, bit for bit with ggml
// itself built so), whatever this build's flags and CPU. The linked
// ggml's MulMat takes its sgemm for most shapes and, built with
// -ffp-contract=off or without -march, rounds every tail product
// separately: last-bit differences that quantized activations downstream
// turn into whole quantization steps.
func (c *Context) MulMatDotF32(a, b Tensor) Tensor {
	na, nb := a.Ne(), b.Ne()
	if a.Type() != formats.F32 || b.Type() != formats.F32 {
		shapeErr("mul_mat_dot_f32: %s times %s (want f32 operands)", a.Type(), b.Type())
	}
	if na[0] != nb[0] || nb[2]%na[2] != 0 || nb[3]%na[3] != 0 {
		shapeErr("mul_mat_dot_f32: shapes %v and %v (want the same width, and a's batches dividing b's)", na, nb)
	}
	if a.Nb()[0] != 4 || b.Nb()[0] != 4 {
		shapeErr("mul_mat_dot_f32: rows are not contiguous")
	}
	p := (*C.struct_sdt_dot_pair)(C.calloc(1, C.sizeof_struct_sdt_dot_pair))
	if p == nil {
		panic(ErrContextFull) // out of C memory: fail the graph, not the process
	}
	// ggml reads the pair while computing a graph of c, which ends before
	// c becomes unreachable (graphs are computed while their context lives).
	runtime.AddCleanup(c, func(q unsafe.Pointer) { C.free(q) }, unsafe.Pointer(p))
	p.t[0], p.t[1] = a.p, b.p
	return c.op(C.sdt_dot_mul_mat_op(c.c, p, C.int64_t(na[1]), C.int64_t(nb[1]), C.int64_t(nb[2]), C.int64_t(nb[3])))
}

// RopeNeoxFMA is Rope in mode RopeNeox (a [d, heads, L, N] F32 with rows
// of contiguous values, pos [L] I32, at most 1024 dims) computed as a
// ggml built with FMA contraction computes it (gcc's default under -march
// on x86-64-v3 and up, as stable-diffusion.cpp's builds are): each
// rotated value is one fused multiply-add over a rounded product, whatever
// this build's flags. The linked ggml built with -ffp-contract=off (which
// keeps its quantizers unfused) or without -march rounds both products:
// last-bit differences that a text encoder's q8_0 activations amplify to
// 0.7% of its hidden states.
func (c *Context) RopeNeoxFMA(a, pos Tensor, dims int, base float32) Tensor {
	na := a.Ne()
	if a.Type() != formats.F32 || a.Nb()[0] != 4 || pos.Type() != formats.I32 || pos.Ne()[0] != na[2] {
		shapeErr("rope_neox_fma: %s %v with %v positions (want f32 rows and one I32 position per row)", a.Type(), na, pos.Ne())
	}
	if dims <= 0 || dims%2 != 0 || int64(dims) > na[0] || dims > 1024 {
		shapeErr("rope_neox_fma: %d dims for %v", dims, na)
	}
	r := (*C.struct_sdt_rope_args)(C.calloc(1, C.sizeof_struct_sdt_rope_args))
	if r == nil {
		panic(ErrContextFull)
	}
	runtime.AddCleanup(c, func(q unsafe.Pointer) { C.free(q) }, unsafe.Pointer(r))
	r.t[0], r.t[1], r.dims, r.base = a.p, pos.p, C.int(dims), C.float(base)
	ne := [4]C.int64_t{C.int64_t(na[0]), C.int64_t(na[1]), C.int64_t(na[2]), C.int64_t(na[3])}
	return c.op(C.sdt_rope_neox_fma_op(c.c, r, &ne[0]))
}

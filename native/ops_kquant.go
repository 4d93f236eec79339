//go:build cgo

package native

/*
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>

// ggml's custom-op entry point (declared here too, so that this addition
// stays in its own file).
struct ggml_context;
struct ggml_tensor;
typedef void (*sdt_kq_op_t)(struct ggml_tensor * dst, int ith, int nth, void * userdata);
struct ggml_tensor * ggml_custom_4d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
	struct ggml_tensor ** args, int n_args, sdt_kq_op_t fun, int n_tasks, void * userdata);
void * ggml_get_data(const struct ggml_tensor * t);

struct sdt_kq_prefix {
	int type;
	void * buffer;
	int64_t ne[4];
	size_t nb[4];
};

// ggml's block layouts (QK_K = 256): q6_K holds the low four bits of each
// value, then the high two, sixteen int8 scales and an fp16 scale; q8_K,
// the activations' type, a float scale, 256 codes and the sums of each
// run of 16 codes.
struct sdt_q6k {
	uint8_t ql[128];
	uint8_t qh[64];
	int8_t sc[16];
	uint16_t d;
};

struct sdt_q8k {
	float d;
	int8_t qs[256];
	int16_t bsums[16];
};

#define SDT_Q8K_BYTES ((int64_t) sizeof(struct sdt_q8k))

// sdt_kq_args holds one product's operands; it lives in C memory (ggml
// keeps only the pointer) and is freed when the Go Context is collected.
struct sdt_kq_args {
	struct ggml_tensor * t[2];
};

static float sdt_kq_half(uint16_t h) {
	const uint32_t sign = (uint32_t) (h & 0x8000) << 16;
	const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	float f;
	if (exp == 0) {
		f = ldexpf((float) man, -24); // zero or subnormal: exact
		return sign ? -f : f;
	}
	uint32_t bits = sign | (exp == 31 ? 0x7f800000u | (man << 13) : ((exp + 112) << 23) | (man << 13));
	memcpy(&f, &bits, sizeof f);
	return f;
}

// sdt_q8k_row quantizes k floats (k a multiple of 256) as ggml's reference
// q8_K quantizer does: per block the value of largest magnitude (the first
// one) gives iscale = -127/max, each code is round-half-even(iscale·x)
// with the product rounded to float first (the reference is compiled
// without FMA contraction in stable-diffusion.cpp's ggml-base), capped at
// 127, and the block's scale is 1/iscale.
static void sdt_q8k_row(const float * x, struct sdt_q8k * y, int64_t k) {
	for (int64_t i = 0; i < k / 256; i++, x += 256) {
		float amax = 0, mx = 0;
		for (int j = 0; j < 256; j++) {
			const float ax = fabsf(x[j]);
			if (ax > amax) {
				amax = ax;
				mx = x[j];
			}
		}
		memset(&y[i], 0, sizeof y[i]);
		if (amax == 0) {
			continue;
		}
		const float iscale = -127.f / mx;
		for (int j = 0; j < 256; j++) {
			const int q = (int) nearbyintf(iscale * x[j]); // no add here for a compiler to fuse
			y[i].qs[j] = (int8_t) (q > 127 ? 127 : q);
			y[i].bsums[j / 16] += y[i].qs[j];
		}
		y[i].d = 1 / iscale;
	}
}

// sdt_q6k_lanes computes the eight int32 lane sums of one q6_K block times
// one q8_K block as stable-diffusion.cpp's ggml (8e800cef) forms them on
// AVX2: lane n takes, from each of the eight runs of 32 values, the
// values 4n..4n+3 of the run, as scale·q·a with the 6-bit code q unsigned
// (0..63), and then subtracts 32·(scale·sum) of the runs of 16 codes 2n
// and 2n+1. The block's total equals the signed sum Σ scale·(q−32)·a,
// but the lanes differ from the older kernel's (which subtracts 32 inside
// each lane), and the lanes are accumulated in float: the split is what
// decides the last bits.
static void sdt_q6k_lanes(const struct sdt_q6k * x, const struct sdt_q8k * y, int32_t lane[8]) {
	for (int n = 0; n < 8; n++) {
		lane[n] = -32 * (x->sc[2*n] * y->bsums[2*n] + x->sc[2*n + 1] * y->bsums[2*n + 1]);
	}
	for (int j = 0; j < 2; j++) {
		const uint8_t * ql = x->ql + 64*j;
		const uint8_t * qh = x->qh + 32*j;
		const int8_t * a = y->qs + 128*j;
		const int8_t * sc = x->sc + 8*j;
		for (int b = 0; b < 32; b++) {
			const int q0 = (ql[b] & 15) | ((qh[b] & 3) << 4);
			const int q1 = (ql[b + 32] & 15) | (((qh[b] >> 2) & 3) << 4);
			const int q2 = (ql[b] >> 4) | (((qh[b] >> 4) & 3) << 4);
			const int q3 = (ql[b + 32] >> 4) | (((qh[b] >> 6) & 3) << 4);
			const int g = b / 16;
			lane[b / 4] += sc[g] * q0 * a[b] + sc[g + 2] * q1 * a[b + 32] + sc[g + 4] * q2 * a[b + 64] +
				sc[g + 6] * q3 * a[b + 96];
		}
	}
}

// sdt_q6k_dot_scalar is the product of nb q6_K blocks and nb q8_K
// blocks: each lane is accumulated in float by a fused multiply-add with
// the two blocks' scales multiplied, then ggml's horizontal sum adds the
// upper four lanes onto the lower, lanes 0+2 and 1+3, then the two.
static float sdt_q6k_dot_scalar(const struct sdt_q6k * x, const struct sdt_q8k * y, int64_t nb) {
	float acc[8] = {0};
	for (int64_t i = 0; i < nb; i++) {
		const float d = y[i].d * sdt_kq_half(x[i].d);
		int32_t lane[8];
		sdt_q6k_lanes(&x[i], &y[i], lane);
		for (int n = 0; n < 8; n++) {
			acc[n] = fmaf(d, (float) lane[n], acc[n]);
		}
	}
	return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

// sdt_q6k_lanes_avx2 is sdt_q6k_lanes with AVX2 integer products: the
// pairwise byte products (exact in 16 bits: at most 2·63·127) are
// weighted by the run's scale into 32-bit lanes of four values each,
// which is the same split.
static __m256i sdt_q6k_lanes_avx2(const struct sdt_q6k * x, const struct sdt_q8k * y) {
	const __m256i lo4 = _mm256_set1_epi8(15), lo2 = _mm256_set1_epi8(3);
	const __m256i bsums = _mm256_loadu_si256((const __m256i *) y->bsums);
	const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) x->sc));
	__m256i sum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 5));
	for (int j = 0; j < 2; j++) {
		const __m256i l0 = _mm256_loadu_si256((const __m256i *) (x->ql + 64*j));
		const __m256i l1 = _mm256_loadu_si256((const __m256i *) (x->ql + 64*j + 32));
		const __m256i h = _mm256_loadu_si256((const __m256i *) (x->qh + 32*j));
		const __m256i q[4] = {
			_mm256_or_si256(_mm256_and_si256(l0, lo4), _mm256_slli_epi16(_mm256_and_si256(h, lo2), 4)),
			_mm256_or_si256(_mm256_and_si256(l1, lo4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), lo2), 4)),
			_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), lo2), 4)),
			_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), lo2), 4)),
		};
		for (int r = 0; r < 4; r++) {
			const __m256i a = _mm256_loadu_si256((const __m256i *) (y->qs + 128*j + 32*r));
			const int g = 8*j + 2*r;
			// scales of the run's two halves: int16 lanes 0-7 and 8-15
			const __m256i s = _mm256_set_m128i(_mm_set1_epi16(x->sc[g + 1]), _mm_set1_epi16(x->sc[g]));
			sum = _mm256_add_epi32(sum, _mm256_madd_epi16(s, _mm256_maddubs_epi16(q[r], a)));
		}
	}
	return sum;
}

// sdt_q6k_dot is sdt_q6k_dot_scalar with the lanes in vectors.
static float sdt_q6k_dot(const struct sdt_q6k * x, const struct sdt_q8k * y, int64_t nb) {
	__m256 acc = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const float d = y[i].d * sdt_kq_half(x[i].d);
		acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sdt_q6k_lanes_avx2(&x[i], &y[i])), acc);
	}
	float l[8];
	_mm256_storeu_ps(l, acc);
	return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}
#else
static float sdt_q6k_dot(const struct sdt_q6k * x, const struct sdt_q8k * y, int64_t nb) {
	return sdt_q6k_dot_scalar(x, y, nb);
}
#endif

// sdt_q8k_quantize_op fills dst (rows of k/256 q8_K blocks) from the F32
// t[0] [K, N, B2, B3] (rows of contiguous values); threads split the rows.
static void sdt_q8k_quantize_op(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
	const struct sdt_kq_args * p = (const struct sdt_kq_args *) userdata;
	const struct sdt_kq_prefix * x = (const struct sdt_kq_prefix *) p->t[1];
	const char * xd = (const char *) ggml_get_data(p->t[1]);
	char * dd = (char *) ggml_get_data(dst);
	const int64_t rows = x->ne[1] * x->ne[2] * x->ne[3];
	const int64_t per = (rows + nth - 1) / nth;
	const int64_t r0 = per * ith, r1 = r0 + per < rows ? r0 + per : rows;
	const int64_t out = x->ne[0] / 256 * SDT_Q8K_BYTES;
	for (int64_t r = r0; r < r1; r++) {
		const int64_t i1 = r % x->ne[1], i2 = (r / x->ne[1]) % x->ne[2], i3 = r / x->ne[1] / x->ne[2];
		sdt_q8k_row((const float *) (xd + i1 * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3]), (struct sdt_q8k *) (dd + r * out), x->ne[0]);
	}
}

// sdt_q6k_mul_op fills dst [M, N, B2, B3] with the q6_K weight t[0] [K, M]
// times the quantized activation t[1] (from sdt_q8k_quantize_op); threads
// split the weight's rows, so each reads only its part of the weight.
static void sdt_q6k_mul_op(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
	const struct sdt_kq_args * p = (const struct sdt_kq_args *) userdata;
	const struct sdt_kq_prefix * w = (const struct sdt_kq_prefix *) p->t[0];
	const struct sdt_kq_prefix * d = (const struct sdt_kq_prefix *) dst;
	const char * wd = (const char *) ggml_get_data(p->t[0]);
	const char * qd = (const char *) ggml_get_data(p->t[1]);
	char * dd = (char *) ggml_get_data(dst);
	const int64_t nb = w->ne[0] / 256, m = w->ne[1];
	const int64_t rows = d->ne[1] * d->ne[2] * d->ne[3];
	const int64_t per = (m + nth - 1) / nth;
	const int64_t m0 = per * ith, m1 = m0 + per < m ? m0 + per : m;
	// tiles of 16 weight rows by 16 activation rows, so that each weight
	// row is read from cache by 16 activation rows
	for (int64_t ib = m0; ib < m1; ib += 16) {
		const int64_t ie = ib + 16 < m1 ? ib + 16 : m1;
		for (int64_t rb = 0; rb < rows; rb += 16) {
			const int64_t re = rb + 16 < rows ? rb + 16 : rows;
			for (int64_t r = rb; r < re; r++) {
				const struct sdt_q8k * a = (const struct sdt_q8k *) (qd + r * nb * SDT_Q8K_BYTES);
				const int64_t i1 = r % d->ne[1], i2 = (r / d->ne[1]) % d->ne[2], i3 = r / d->ne[1] / d->ne[2];
				float * out = (float *) (dd + i1 * d->nb[1] + i2 * d->nb[2] + i3 * d->nb[3]);
				for (int64_t i = ib; i < ie; i++) {
					out[i] = sdt_q6k_dot((const struct sdt_q6k *) (wd + i * w->nb[1]), a, nb);
				}
			}
		}
	}
}

static struct ggml_tensor * sdt_q8k_quantize(struct ggml_context * ctx, struct sdt_kq_args * p, int i8) {
	const struct sdt_kq_prefix * x = (const struct sdt_kq_prefix *) p->t[1];
	return ggml_custom_4d(ctx, i8, x->ne[0] / 256 * SDT_Q8K_BYTES, x->ne[1], x->ne[2], x->ne[3], p->t, 2,
		sdt_q8k_quantize_op, -1, p);
}

static struct ggml_tensor * sdt_q6k_mul(struct ggml_context * ctx, struct sdt_kq_args * p, const int64_t * ne) {
	return ggml_custom_4d(ctx, 0, ne[0], ne[1], ne[2], ne[3], p->t, 2, sdt_q6k_mul_op, -1, p);
}

// sdt_q6k_dot_rows is the test hook: the product of one q6_K row of k
// values and one F32 row, by the build's kernel or by the scalar one.
static float sdt_q6k_dot_rows(const void * w, const float * x, int64_t k, int scalar) {
	struct sdt_q8k * a = (struct sdt_q8k *) malloc((size_t) (k / 256) * sizeof(struct sdt_q8k));
	if (a == NULL) {
		return NAN;
	}
	sdt_q8k_row(x, a, k);
	const struct sdt_q6k * q = (const struct sdt_q6k *) w;
	const float s = scalar ? sdt_q6k_dot_scalar(q, a, k / 256) : sdt_q6k_dot(q, a, k / 256);
	free(a);
	return s;
}
*/
import "C"

import (
	"math"
	"runtime"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

// q6KAsSDCPP routes q6_K products through mulMatQ6K; tests and benchmarks
// turn it off to measure the linked ggml's own kernel.
var q6KAsSDCPP = true

// mulMatQ6K computes MulMat for a q6_K weight a [K, M] (2-D, contiguous)
// and an F32 b [K, N, B2, B3] (rows of contiguous values) as
// stable-diffusion.cpp's ggml computes it, whatever this build's ggml
// version: b's rows are quantized to q8_K, and each q6_K block's integer
// products are split into eight lanes as ggml 8e800cef's AVX2 kernel
// splits them (the Go module's older ggml splits them otherwise, so its
// float sums round differently, and quantized activations downstream turn
// those last bits into whole code steps: 38.7 dB between the two
// programs' images of one q6_K SD 1.5 file). It reports false for shapes
// it does not take, which MulMat then gives to ggml.
func (c *Context) mulMatQ6K(a, b Tensor) (Tensor, bool) {
	na, nb := a.Ne(), b.Ne()
	if a.Type() != formats.Q6_K || b.Type() != formats.F32 || na[2] != 1 || na[3] != 1 || !a.contiguous() ||
		b.Nb()[0] != 4 || na[0] != nb[0] || na[0]%256 != 0 {
		return Tensor{}, false
	}
	p := (*C.struct_sdt_kq_args)(C.calloc(1, C.sizeof_struct_sdt_kq_args))
	if p == nil {
		panic(ErrContextFull) // out of C memory: fail the graph, not the process
	}
	// ggml reads the operands while computing a graph of c, which ends
	// before c becomes unreachable (graphs are computed while their context lives).
	runtime.AddCleanup(c, func(q unsafe.Pointer) { C.free(q) }, unsafe.Pointer(p))
	p.t[0], p.t[1] = a.p, b.p
	q := c.op(C.sdt_q8k_quantize(c.c, p, C.int(formats.I8)))
	p2 := (*C.struct_sdt_kq_args)(C.calloc(1, C.sizeof_struct_sdt_kq_args))
	if p2 == nil {
		panic(ErrContextFull)
	}
	runtime.AddCleanup(c, func(q unsafe.Pointer) { C.free(q) }, unsafe.Pointer(p2))
	p2.t[0], p2.t[1] = a.p, q.p
	ne := [4]C.int64_t{C.int64_t(na[1]), C.int64_t(nb[1]), C.int64_t(nb[2]), C.int64_t(nb[3])}
	return c.op(C.sdt_q6k_mul(c.c, p2, &ne[0])), true
}

// q6kDotRow is the product of one q6_K row (k/256 blocks of ggml's
// layout) and k floats as mulMatQ6K computes each output, through the
// build's kernel or the scalar one; for tests.
func q6kDotRow(w []byte, x []float32, scalar bool) float32 {
	if len(x) == 0 || len(x)%256 != 0 || len(w) != len(x)/256*210 {
		return float32(math.NaN())
	}
	s := C.int(0)
	if scalar {
		s = 1
	}
	return float32(C.sdt_q6k_dot_rows(unsafe.Pointer(&w[0]), (*C.float)(unsafe.Pointer(&x[0])), C.int64_t(len(x)), s))
}

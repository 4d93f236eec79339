//go:build cgo

#include "w8a8.h"

#include <math.h>
#include <string.h>

// Up to three implementations of each kernel: plain C (any CPU), AVX2 and,
// for the product, AVX-512 VNNI (x86 CPUs that have them). The SIMD
// functions carry their own target attributes and are chosen at run time,
// so that a binary built without -march flags (plain go build, go test)
// still runs the fast kernels, and so that tests can run each on one
// machine (sdt_w8a8_use_level). All compute the same bits: the products are
// exact integer sums, and the float steps (rotation, scale, codes, rescale)
// run in the same order in each.
#if defined(__x86_64__) || defined(__i386__)
#define SDT_X86 1
#include <immintrin.h>
#define SDT_AVX2 __attribute__((target("avx2")))
#define SDT_VNNI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni")))
#include <cpuid.h>
#if SDT_W8A8_BUILT_AVXVNNI
#define SDT_HAVE_AVXVNNI 1
#define SDT_AVXVNNI __attribute__((target("avx2,avxvnni")))
#endif
#endif

// level is the kernel set in use (an SDT_W8A8_ constant), the best the CPU
// has, set once at start; tests and benchmarks switch it to the others.
static int level;

// has_avxvnni reads CPUID leaf 7, subleaf 1, EAX bit 4 (AVX-VNNI), which
// not every compiler's __builtin_cpu_supports knows.
#if defined(SDT_HAVE_AVXVNNI)
static int has_avxvnni(void) {
	unsigned a, b, c, d;
	return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
}
#endif

int sdt_w8a8_has_level(int l) {
	switch (l) {
	case SDT_W8A8_GENERIC:
		return 1;
#if defined(SDT_X86)
	case SDT_W8A8_AVX2:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2");
#if defined(SDT_HAVE_AVXVNNI)
	case SDT_W8A8_AVXVNNI:
		return sdt_w8a8_has_level(SDT_W8A8_AVX2) && has_avxvnni();
#endif
	case SDT_W8A8_VNNI:
		return sdt_w8a8_has_level(SDT_W8A8_AVX2) && __builtin_cpu_supports("avx512vnni") &&
			__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
	}
	return 0;
}

__attribute__((constructor)) static void sdt_w8a8_init(void) {
	for (int l = SDT_W8A8_GENERIC; l < SDT_W8A8_LEVELS; l++) {
		if (sdt_w8a8_has_level(l)) {
			level = l;
		}
	}
}

// ---- activation quantization ----------------------------------------------------------

// rotate_group applies the normalised Hadamard transform of size g to v in
// the order of operations stable-diffusion.cpp's CPU backend uses, so that
// the rotated values, and so the codes, are the ones its runtime computes:
// every value times 1/sqrt(g) first, then stages of strides 1, 4, 16, ...
// of unnormalised 4-point butterflies, each output summed left to right.
static void rotate_group(float * v, int g) {
	const float s = 1.0f / sqrtf((float) g);
	for (int i = 0; i < g; i++) {
		v[i] *= s;
	}
	for (int stride = 1; stride < g; stride *= 4) {
		for (int base = 0; base < g; base += 4 * stride) {
			for (int j = 0; j < stride; j++) {
				float * p = v + base + j;
				const float a = p[0], b = p[stride], c = p[2 * stride], d = p[3 * stride];
				p[0] = a + b + c - d;
				p[stride] = a + b - c + d;
				p[2 * stride] = a - b + c + d;
				p[3 * stride] = -a + b + c + d;
			}
		}
	}
}

// code rounds v·inv half to even and clamps it to ±127. Clamping before
// rounding gives the same code for every finite product and keeps an
// infinite one (a row whose scale underflowed) at ±127 instead of at the
// conversion's overflow value; NaN becomes -127, as in the AVX2 kernel.
static int8_t code_lv(float v, float inv, float lim) {
	float y = v * inv;
	y = y > -lim ? y : -lim; // NaN takes -lim here
	y = y < lim ? y : lim;
	return (int8_t) lrintf(y); // round half to even, the default mode
}

static int8_t code(float v, float inv) { return code_lv(v, inv, 127.0f); }

// put_scale stores a row's scale, absmax/127, after its k codes and sets
// *inv to its reciprocal; for an all-zero row it writes zero codes and
// returns 0, so that the caller has no codes left to compute.
static int put_scale_lv(int8_t * out, int64_t k, float amax, float lim, float * inv) {
	const float scale = amax / lim;
	memcpy(out + k, &scale, sizeof scale);
	if (scale == 0.0f) {
		memset(out, 0, (size_t) k);
		return 0;
	}
	*inv = 1.0f / scale;
	return 1;
}

static int put_scale(int8_t * out, int64_t k, float amax, float * inv) {
	return put_scale_lv(out, k, amax, 127.0f, inv);
}

// quantize_row_generic_lv is the reference row quantizer with codes in
// ±lim and scale absmax/lim (lim 127 for INT8; 7 for ComfyUI's int4
// activations of convrot_w4a4, comfy-kitchen's quantize_signed_int4_rowwise).
static void quantize_row_generic_lv(const float * src, int8_t * out, int64_t k, int group, float lim) {
	float amax = 0.0f;
	float v[SDT_W8A8_MAX_GROUP];
	if (group == 0) {
		for (int64_t i = 0; i < k; i++) {
			const float a = fabsf(src[i]);
			amax = a > amax ? a : amax;
		}
	} else {
		for (int64_t g = 0; g < k; g += group) {
			memcpy(v, src + g, (size_t) group * sizeof(float));
			rotate_group(v, group);
			for (int i = 0; i < group; i++) {
				const float a = fabsf(v[i]);
				amax = a > amax ? a : amax;
			}
		}
	}
	float inv;
	if (!put_scale_lv(out, k, amax, lim, &inv)) {
		return;
	}
	if (group == 0) {
		for (int64_t i = 0; i < k; i++) {
			out[i] = code_lv(src[i], inv, lim);
		}
		return;
	}
	// The second pass rotates again rather than keeping a row of floats
	// (this is the reference path; the AVX2 one keeps the row).
	for (int64_t g = 0; g < k; g += group) {
		memcpy(v, src + g, (size_t) group * sizeof(float));
		rotate_group(v, group);
		for (int i = 0; i < group; i++) {
			out[g + i] = code_lv(v[i], inv, lim);
		}
	}
}

static void quantize_row_generic(const float * src, int8_t * out, int64_t k, int group) {
	quantize_row_generic_lv(src, out, k, group, 127.0f);
}

#if defined(SDT_X86)

// ROW_BUF is how many rotated values the AVX2 path keeps (32 KB on the
// stack): rows up to it are rotated once, longer ones twice.
enum { ROW_BUF = 8192 };

// bfly1 is the stride-1 stage on the two groups of four in x: lane j of
// each group gets a+b+c-d, a+b-c+d, a-b+c+d, -a+b+c+d (j = 0..3), summed
// left to right; a negated operand is added, which is the same IEEE
// operation as subtracting it.
SDT_AVX2 static inline __m256 bfly1(__m256 x) {
	const __m256 ma = _mm256_setr_ps(0, 0, 0, -0.0f, 0, 0, 0, -0.0f);
	const __m256 mb = _mm256_setr_ps(0, 0, -0.0f, 0, 0, 0, -0.0f, 0);
	const __m256 mc = _mm256_setr_ps(0, -0.0f, 0, 0, 0, -0.0f, 0, 0);
	const __m256 md = _mm256_setr_ps(-0.0f, 0, 0, 0, -0.0f, 0, 0, 0);
	const __m256 a = _mm256_xor_ps(_mm256_permute_ps(x, 0x00), ma);
	const __m256 b = _mm256_xor_ps(_mm256_permute_ps(x, 0x55), mb);
	const __m256 c = _mm256_xor_ps(_mm256_permute_ps(x, 0xaa), mc);
	const __m256 d = _mm256_xor_ps(_mm256_permute_ps(x, 0xff), md);
	return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a, b), c), d);
}

// bfly4 is the stride-4 stage on sixteen values x0 (a in the low half, b
// in the high half) and x1 (c, d).
SDT_AVX2 static inline void bfly4(__m256 * x0, __m256 * x1) {
	const __m256 hi = _mm256_setr_ps(0, 0, 0, 0, -0.0f, -0.0f, -0.0f, -0.0f);
	const __m256 lo = _mm256_setr_ps(-0.0f, -0.0f, -0.0f, -0.0f, 0, 0, 0, 0);
	const __m256 a = _mm256_permute2f128_ps(*x0, *x0, 0x00), b = _mm256_permute2f128_ps(*x0, *x0, 0x11);
	const __m256 c = _mm256_permute2f128_ps(*x1, *x1, 0x00), d = _mm256_permute2f128_ps(*x1, *x1, 0x11);
	// [a+b+c-d | a+b-c+d] and [a-b+c+d | -a+b+c+d]
	*x0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_xor_ps(c, hi)), _mm256_xor_ps(d, lo));
	*x1 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_xor_ps(a, hi), _mm256_xor_ps(b, lo)), c), d);
}

// bfly_wide is a stage of stride 16 or more over the g values of v.
SDT_AVX2 static void bfly_wide(float * v, int64_t n, int stride) {
	for (int64_t base = 0; base < n; base += 4 * stride) {
		for (int j = 0; j < stride; j += 8) {
			float * p = v + base + j;
			const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + stride);
			const __m256 c = _mm256_loadu_ps(p + 2 * stride), d = _mm256_loadu_ps(p + 3 * stride);
			const __m256 ab = _mm256_add_ps(a, b), amb = _mm256_sub_ps(a, b), bma = _mm256_sub_ps(b, a);
			_mm256_storeu_ps(p, _mm256_sub_ps(_mm256_add_ps(ab, c), d));
			_mm256_storeu_ps(p + stride, _mm256_add_ps(_mm256_sub_ps(ab, c), d));
			_mm256_storeu_ps(p + 2 * stride, _mm256_add_ps(_mm256_add_ps(amb, c), d));
			_mm256_storeu_ps(p + 3 * stride, _mm256_add_ps(_mm256_add_ps(bma, c), d));
		}
	}
}

// amax_avx2 returns the largest |src[i]|, skipping NaN as the scalar loop does.
SDT_AVX2 static float amax_avx2(const float * src, int64_t n) {
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 m0 = _mm256_setzero_ps(), m1 = m0;
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		m0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i), absmask), m0);
		m1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i + 8), absmask), m1);
	}
	float lanes[8];
	_mm256_storeu_ps(lanes, _mm256_max_ps(m0, m1));
	float amax = 0.0f;
	for (int l = 0; l < 8; l++) {
		amax = lanes[l] > amax ? lanes[l] : amax;
	}
	for (; i < n; i++) {
		const float a = fabsf(src[i]);
		amax = a > amax ? a : amax;
	}
	return amax;
}

// rotate_avx2 writes the n values of src (n a multiple of g) rotated by
// groups of g to v, in rotate_group's order, and returns their absmax.
SDT_AVX2 static float rotate_avx2(const float * src, float * v, int64_t n, int g) {
	const float s = 1.0f / sqrtf((float) g);
	const __m256 vs = _mm256_set1_ps(s);
	int64_t i = 0;
	if (g >= 16) {
		for (; i < n; i += 16) {
			__m256 x0 = bfly1(_mm256_mul_ps(_mm256_loadu_ps(src + i), vs));
			__m256 x1 = bfly1(_mm256_mul_ps(_mm256_loadu_ps(src + i + 8), vs));
			bfly4(&x0, &x1);
			_mm256_storeu_ps(v + i, x0);
			_mm256_storeu_ps(v + i + 8, x1);
		}
		for (int stride = 16; stride < g; stride *= 4) {
			bfly_wide(v, n, stride);
		}
	} else { // g == 4
		for (; i + 8 <= n; i += 8) {
			_mm256_storeu_ps(v + i, bfly1(_mm256_mul_ps(_mm256_loadu_ps(src + i), vs)));
		}
		for (; i < n; i += 4) {
			memcpy(v + i, src + i, 4 * sizeof(float));
			rotate_group(v + i, 4);
		}
	}
	return amax_avx2(v, n);
}

// codes_avx2 writes code(v[i], inv) for the n values of v.
SDT_AVX2 static void codes_avx2(const float * v, int8_t * out, int64_t n, float inv) {
	const __m256 vi = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
	const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m256i q[4];
		for (int j = 0; j < 4; j++) {
			__m256 y = _mm256_mul_ps(_mm256_loadu_ps(v + i + 8 * j), vi);
			y = _mm256_min_ps(_mm256_max_ps(y, lo), hi); // max(NaN, lo) is lo, as in code()
			q[j] = _mm256_cvtps_epi32(y); // round half to even (MXCSR's default)
		}
		const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
		_mm256_storeu_si256((__m256i *) (out + i), _mm256_permutevar8x32_epi32(p, perm));
	}
	for (; i < n; i++) {
		out[i] = code(v[i], inv);
	}
}

SDT_AVX2 static void quantize_row_avx2(const float * src, int8_t * out, int64_t k, int group) {
	float buf[ROW_BUF];
	float amax = 0.0f;
	const int kept = group != 0 && k <= ROW_BUF;
	if (group == 0) {
		amax = amax_avx2(src, k);
	} else {
		for (int64_t off = 0; off < k; off += ROW_BUF) {
			const int64_t n = k - off < ROW_BUF ? k - off : ROW_BUF; // ROW_BUF is a multiple of every group
			const float a = rotate_avx2(src + off, buf, n, group);
			amax = a > amax ? a : amax;
		}
	}
	float inv;
	if (!put_scale(out, k, amax, &inv)) {
		return;
	}
	if (group == 0) {
		codes_avx2(src, out, k, inv);
	} else if (kept) {
		codes_avx2(buf, out, k, inv);
	} else {
		for (int64_t off = 0; off < k; off += ROW_BUF) {
			const int64_t n = k - off < ROW_BUF ? k - off : ROW_BUF;
			rotate_avx2(src + off, buf, n, group);
			codes_avx2(buf, out + off, n, inv);
		}
	}
}

#endif

void sdt_w8a8_quantize_row(const float * src, int8_t * out, int64_t k, int group) {
#if defined(SDT_X86)
	if (level >= SDT_W8A8_AVX2) {
		quantize_row_avx2(src, out, k, group);
		return;
	}
#endif
	quantize_row_generic(src, out, k, group);
}

// ---- sharing an op's work between its threads -------------------------------------------

// units_begin returns the first unit thread ith takes: with a scheduler,
// the next one not yet taken; without, the start of its static share.
static int64_t units_begin(sdt_w8a8_sched * s, int64_t units, int ith, int nth) {
	if (s) {
		return __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
	}
	const int64_t u0 = units * ith / nth;
	return u0 < units * (ith + 1) / nth ? u0 : units; // an empty share
}

// units_next returns the unit after u (the next free one with a scheduler)
// or a value of units or more when the thread is done; a thread that is
// done then calls units_end.
static int64_t units_next(sdt_w8a8_sched * s, int64_t u, int64_t units, int ith, int nth) {
	if (s) {
		return __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
	}
	return u + 1 < units * (ith + 1) / nth ? u + 1 : units;
}

// units_end resets the scheduler once every thread of this run has taken
// its last unit, so that the graph's next run starts from zero (ggml's
// barrier after the op orders the reset before that run).
static void units_end(sdt_w8a8_sched * s, int nth) {
	if (s && __atomic_add_fetch(&s->done, 1, __ATOMIC_ACQ_REL) == nth) {
		__atomic_store_n(&s->next, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->done, 0, __ATOMIC_RELEASE);
	}
}

enum { QUANT_ROWS = 16 }; // rows per unit of the quantization op

void sdt_w8a8_quantize_rows_lv(const float * src, int8_t * out, int64_t k, int64_t rows, int group, int levels, int ith,
	int nth, sdt_w8a8_sched * s) {
	const int64_t units = (rows + QUANT_ROWS - 1) / QUANT_ROWS;
	for (int64_t u = units_begin(s, units, ith, nth); u < units; u = units_next(s, u, units, ith, nth)) {
		const int64_t r1 = (u + 1) * QUANT_ROWS < rows ? (u + 1) * QUANT_ROWS : rows;
		for (int64_t r = u * QUANT_ROWS; r < r1; r++) {
			quantize_row_generic_lv(src + r * k, out + r * (k + 4), k, group, (float) levels);
		}
	}
	units_end(s, nth);
}

void sdt_w8a8_quantize_rows(const float * src, int8_t * out, int64_t k, int64_t rows, int group, int ith, int nth,
	sdt_w8a8_sched * s) {
	const int64_t units = (rows + QUANT_ROWS - 1) / QUANT_ROWS;
	for (int64_t u = units_begin(s, units, ith, nth); u < units; u = units_next(s, u, units, ith, nth)) {
		const int64_t r1 = (u + 1) * QUANT_ROWS < rows ? (u + 1) * QUANT_ROWS : rows;
		for (int64_t r = u * QUANT_ROWS; r < r1; r++) {
			sdt_w8a8_quantize_row(src + r * k, out + r * (k + 4), k, group);
		}
	}
	units_end(s, nth);
}

// ---- the product ------------------------------------------------------------------------

// rescale turns an exact dot product into the output element, in
// stable-diffusion.cpp's order: ((sum · xs) · ws) + bias.
static inline float rescale(int32_t sum, float xs, float ws, const float * bias, int64_t j) {
	float v = (float) sum * xs;
	v *= ws;
	if (bias) {
		v += bias[j];
	}
	return v;
}

// A plan cuts the output into units of rb activation rows by nb weight
// rows, numbered row block by row block, which the threads take in turn
// (units_begin). Within a unit the kernels take four weight rows
// at a time (they stay in L1) past every row of the block (rb·k bytes,
// sized for L2), so that each byte loaded from beyond L1 serves many
// products; the units are many enough for the threads to finish together.
struct plan {
	int64_t rb, nb, nrb, ncb;
};

static struct plan plan_for(int64_t k, int64_t n, int64_t rows, int nth) {
	struct plan p;
	p.rb = (128 * 1024) / (k + 4);
	p.rb = p.rb > 64 ? 64 : p.rb < 2 ? 2 : p.rb & ~(int64_t) 1;
	p.nrb = (rows + p.rb - 1) / p.rb;
	int64_t ncb = 1;
	while (p.nrb * ncb < 8 * (int64_t) nth && n / (ncb * 2) >= 16) {
		ncb *= 2;
	}
	p.nb = ((n + ncb - 1) / ncb + 3) & ~(int64_t) 3;
	p.ncb = (n + p.nb - 1) / p.nb;
	return p;
}

static int32_t dot_generic(const int8_t * a, const int8_t * b, int64_t k) {
	int32_t sum = 0;
	for (int64_t i = 0; i < k; i++) {
		sum += (int32_t) a[i] * (int32_t) b[i];
	}
	return sum;
}

// one_by_one computes the outputs of rows r0..r1 against weight rows
// j0..j1 one dot product at a time: the whole product of the plain C
// kernels, and the last few weight rows of a block in the SIMD ones.
static void one_by_one(int32_t (*dot)(const int8_t *, const int8_t *, int64_t), const int8_t * w,
	const int8_t * xq, const float * ws, const float * bias, float * dst, int64_t k, int64_t n, int64_t r0,
	int64_t r1, int64_t j0, int64_t j1) {
	const int64_t stride = k + 4;
	for (int64_t j = j0; j < j1; j++) {
		for (int64_t r = r0; r < r1; r++) {
			const int8_t * a = xq + r * stride;
			float s;
			memcpy(&s, a + k, sizeof s);
			dst[r * n + j] = rescale(dot(a, w + j * k, k), s, ws[j], bias, j);
		}
	}
}

#if defined(SDT_X86)

// madd accumulates 32 products of a and b into acc: |a| (unsigned) times b
// with a's sign gives pairs of at most 2·127·127 < 2^15, so the 16-bit
// stage never saturates and the sum is exact (codes are in [-127, 127]).
SDT_AVX2 static inline __m256i madd(__m256i acc, __m256i ua, __m256i a, __m256i b, __m256i ones) {
	const __m256i p = _mm256_maddubs_epi16(ua, _mm256_sign_epi8(b, a));
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
}

// hsum4 returns the sums of the eight lanes of c0..c3 as four lanes.
SDT_AVX2 static inline __m128i hsum4(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
	const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(c0, c1), _mm256_hadd_epi32(c2, c3));
	return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// store4 rescales four sums of one activation row (scale xs) against
// weight rows j..j+3 and stores them at d.
SDT_AVX2 static inline void store4(__m128i sums, float xs, const float * ws, const float * bias, float * d) {
	__m128 v = _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_set1_ps(xs));
	v = _mm_mul_ps(v, _mm_loadu_ps(ws));
	if (bias) {
		v = _mm_add_ps(v, _mm_loadu_ps(bias));
	}
	_mm_storeu_ps(d, v);
}

// tail4 adds the products of the last k%32 codes of a with four weight rows.
static inline __m128i tail4(__m128i sums, const int8_t * a, const int8_t * w, int64_t i, int64_t k) {
	if (i == k) {
		return sums;
	}
	int32_t s[4];
	memcpy(s, &sums, sizeof s);
	for (int q = 0; q < 4; q++) {
		s[q] += dot_generic(a + i, w + q * k + i, k - i);
	}
	memcpy(&sums, s, sizeof s);
	return sums;
}

// rows2x4 computes the outputs of activation rows a0, a1 (scales s0, s1)
// against weight rows w..w+3k: eight accumulators, each weight load serving
// two rows and each activation load four weight rows.
SDT_AVX2 static void rows2x4(const int8_t * a0, const int8_t * a1, float s0, float s1, const int8_t * w, int64_t k,
	const float * ws, const float * bias, float * d0, float * d1) {
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00;
	__m256i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
	const int8_t * w1 = w + k, * w2 = w1 + k, * w3 = w2 + k;
	int64_t i = 0;
	for (; i + 32 <= k; i += 32) {
		const __m256i x0 = _mm256_loadu_si256((const __m256i *) (a0 + i));
		const __m256i x1 = _mm256_loadu_si256((const __m256i *) (a1 + i));
		const __m256i u0 = _mm256_sign_epi8(x0, x0), u1 = _mm256_sign_epi8(x1, x1);
		__m256i v = _mm256_loadu_si256((const __m256i *) (w + i));
		c00 = madd(c00, u0, x0, v, ones);
		c10 = madd(c10, u1, x1, v, ones);
		v = _mm256_loadu_si256((const __m256i *) (w1 + i));
		c01 = madd(c01, u0, x0, v, ones);
		c11 = madd(c11, u1, x1, v, ones);
		v = _mm256_loadu_si256((const __m256i *) (w2 + i));
		c02 = madd(c02, u0, x0, v, ones);
		c12 = madd(c12, u1, x1, v, ones);
		v = _mm256_loadu_si256((const __m256i *) (w3 + i));
		c03 = madd(c03, u0, x0, v, ones);
		c13 = madd(c13, u1, x1, v, ones);
	}
	store4(tail4(hsum4(c00, c01, c02, c03), a0, w, i, k), s0, ws, bias, d0);
	store4(tail4(hsum4(c10, c11, c12, c13), a1, w, i, k), s1, ws, bias, d1);
}

// rows1x4 is rows2x4 for a last, odd activation row.
SDT_AVX2 static void rows1x4(const int8_t * a0, float s0, const int8_t * w, int64_t k, const float * ws,
	const float * bias, float * d0) {
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
	int64_t i = 0;
	for (; i + 32 <= k; i += 32) {
		const __m256i x = _mm256_loadu_si256((const __m256i *) (a0 + i));
		const __m256i u = _mm256_sign_epi8(x, x);
		c0 = madd(c0, u, x, _mm256_loadu_si256((const __m256i *) (w + i)), ones);
		c1 = madd(c1, u, x, _mm256_loadu_si256((const __m256i *) (w + k + i)), ones);
		c2 = madd(c2, u, x, _mm256_loadu_si256((const __m256i *) (w + 2 * k + i)), ones);
		c3 = madd(c3, u, x, _mm256_loadu_si256((const __m256i *) (w + 3 * k + i)), ones);
	}
	store4(tail4(hsum4(c0, c1, c2, c3), a0, w, i, k), s0, ws, bias, d0);
}

// dot_avx2 returns the exact dot product of k codes.
SDT_AVX2 static int32_t dot_avx2(const int8_t * a, const int8_t * b, int64_t k) {
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i acc = _mm256_setzero_si256();
	int64_t i = 0;
	for (; i + 32 <= k; i += 32) {
		const __m256i va = _mm256_loadu_si256((const __m256i *) (a + i));
		acc = madd(acc, _mm256_sign_epi8(va, va), va, _mm256_loadu_si256((const __m256i *) (b + i)), ones);
	}
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s) + dot_generic(a + i, b + i, k - i);
}

SDT_AVX2 static void unit_avx2(const int8_t * w, const int8_t * xq, const float * ws, const float * bias,
	float * dst, int64_t k, int64_t n, int64_t r0, int64_t r1, int64_t j0, int64_t j1) {
	const int64_t stride = k + 4;
	int64_t j = j0;
	for (; j + 4 <= j1; j += 4) {
		const float * b = bias ? bias + j : NULL;
		int64_t r = r0;
		for (; r + 2 <= r1; r += 2) {
			const int8_t * a0 = xq + r * stride, * a1 = a0 + stride;
			float s0, s1;
			memcpy(&s0, a0 + k, sizeof s0);
			memcpy(&s1, a1 + k, sizeof s1);
			rows2x4(a0, a1, s0, s1, w + j * k, k, ws + j, b, dst + r * n + j, dst + (r + 1) * n + j);
		}
		if (r < r1) {
			const int8_t * a0 = xq + r * stride;
			float s0;
			memcpy(&s0, a0 + k, sizeof s0);
			rows1x4(a0, s0, w + j * k, k, ws + j, b, dst + r * n + j);
		}
	}
	one_by_one(dot_avx2, w, xq, ws, bias, dst, k, n, r0, r1, j, j1);
}

// kmask selects the bytes of the 64 at i that lie before k.
static inline __mmask64 kmask(int64_t i, int64_t k) {
	return k - i >= 64 ? ~(__mmask64) 0 : ((__mmask64) 1 << (k - i)) - 1;
}

// half adds the two 256-bit halves of c.
SDT_VNNI static inline __m256i half(__m512i c) {
	return _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
}

// The VNNI kernels multiply unsigned by signed bytes (vpdpbusd, four
// products summed into each INT32 lane, no saturation), so an activation
// code x is fed as x+128 (x xor 0x80, in [1, 255]) and 128·Σw is taken
// off each sum afterwards: Σ(x+128)·w - 128·Σw = Σx·w, exactly. Bytes past
// k are loaded as zero weights (masked loads), which add nothing.

// offsets4_vnni returns 128·Σw for the four weight rows w..w+3k.
SDT_VNNI static __m128i offsets4_vnni(const int8_t * w, int64_t k) {
	const __m512i ones = _mm512_set1_epi8(1);
	__m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0;
	for (int64_t i = 0; i < k; i += 64) {
		const __mmask64 m = kmask(i, k);
		c0 = _mm512_dpbusd_epi32(c0, ones, _mm512_maskz_loadu_epi8(m, w + i));
		c1 = _mm512_dpbusd_epi32(c1, ones, _mm512_maskz_loadu_epi8(m, w + k + i));
		c2 = _mm512_dpbusd_epi32(c2, ones, _mm512_maskz_loadu_epi8(m, w + 2 * k + i));
		c3 = _mm512_dpbusd_epi32(c3, ones, _mm512_maskz_loadu_epi8(m, w + 3 * k + i));
	}
	return _mm_slli_epi32(hsum4(half(c0), half(c1), half(c2), half(c3)), 7);
}

// rows2x4_vnni is rows2x4 with vpdpbusd; off is offsets4_vnni of the weight rows.
SDT_VNNI static void rows2x4_vnni(const int8_t * a0, const int8_t * a1, float s0, float s1, const int8_t * w,
	int64_t k, __m128i off, const float * ws, const float * bias, float * d0, float * d1) {
	const __m512i flip = _mm512_set1_epi8((char) 0x80);
	__m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00;
	__m512i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
	const int8_t * w1 = w + k, * w2 = w1 + k, * w3 = w2 + k;
	for (int64_t i = 0; i < k; i += 64) {
		const __mmask64 m = kmask(i, k);
		const __m512i x0 = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, a0 + i), flip);
		const __m512i x1 = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, a1 + i), flip);
		__m512i v = _mm512_maskz_loadu_epi8(m, w + i);
		c00 = _mm512_dpbusd_epi32(c00, x0, v);
		c10 = _mm512_dpbusd_epi32(c10, x1, v);
		v = _mm512_maskz_loadu_epi8(m, w1 + i);
		c01 = _mm512_dpbusd_epi32(c01, x0, v);
		c11 = _mm512_dpbusd_epi32(c11, x1, v);
		v = _mm512_maskz_loadu_epi8(m, w2 + i);
		c02 = _mm512_dpbusd_epi32(c02, x0, v);
		c12 = _mm512_dpbusd_epi32(c12, x1, v);
		v = _mm512_maskz_loadu_epi8(m, w3 + i);
		c03 = _mm512_dpbusd_epi32(c03, x0, v);
		c13 = _mm512_dpbusd_epi32(c13, x1, v);
	}
	store4(_mm_sub_epi32(hsum4(half(c00), half(c01), half(c02), half(c03)), off), s0, ws, bias, d0);
	store4(_mm_sub_epi32(hsum4(half(c10), half(c11), half(c12), half(c13)), off), s1, ws, bias, d1);
}

#if defined(SDT_HAVE_AVXVNNI)

// offsets4_avxvnni returns 128·Σw over the first k/32·32 bytes of the four
// weight rows w..w+3k: the part rows2x4_avxvnni feeds to vpdpbusd.
SDT_AVXVNNI static __m128i offsets4_avxvnni(const int8_t * w, int64_t k) {
	const __m256i ones = _mm256_set1_epi8(1);
	__m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
	for (int64_t i = 0; i + 32 <= k; i += 32) {
		c0 = _mm256_dpbusd_avx_epi32(c0, ones, _mm256_loadu_si256((const __m256i *) (w + i)));
		c1 = _mm256_dpbusd_avx_epi32(c1, ones, _mm256_loadu_si256((const __m256i *) (w + k + i)));
		c2 = _mm256_dpbusd_avx_epi32(c2, ones, _mm256_loadu_si256((const __m256i *) (w + 2 * k + i)));
		c3 = _mm256_dpbusd_avx_epi32(c3, ones, _mm256_loadu_si256((const __m256i *) (w + 3 * k + i)));
	}
	return _mm_slli_epi32(hsum4(c0, c1, c2, c3), 7);
}

// rows2x4_avxvnni is rows2x4_vnni on 32 bytes at a time (AVX-VNNI has no
// masked loads): the last k%32 codes are added exactly by tail4.
SDT_AVXVNNI static void rows2x4_avxvnni(const int8_t * a0, const int8_t * a1, float s0, float s1, const int8_t * w,
	int64_t k, __m128i off, const float * ws, const float * bias, float * d0, float * d1) {
	const __m256i flip = _mm256_set1_epi8((char) 0x80);
	__m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00;
	__m256i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
	const int8_t * w1 = w + k, * w2 = w1 + k, * w3 = w2 + k;
	int64_t i = 0;
	for (; i + 32 <= k; i += 32) {
		const __m256i x0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *) (a0 + i)), flip);
		const __m256i x1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *) (a1 + i)), flip);
		__m256i v = _mm256_loadu_si256((const __m256i *) (w + i));
		c00 = _mm256_dpbusd_avx_epi32(c00, x0, v);
		c10 = _mm256_dpbusd_avx_epi32(c10, x1, v);
		v = _mm256_loadu_si256((const __m256i *) (w1 + i));
		c01 = _mm256_dpbusd_avx_epi32(c01, x0, v);
		c11 = _mm256_dpbusd_avx_epi32(c11, x1, v);
		v = _mm256_loadu_si256((const __m256i *) (w2 + i));
		c02 = _mm256_dpbusd_avx_epi32(c02, x0, v);
		c12 = _mm256_dpbusd_avx_epi32(c12, x1, v);
		v = _mm256_loadu_si256((const __m256i *) (w3 + i));
		c03 = _mm256_dpbusd_avx_epi32(c03, x0, v);
		c13 = _mm256_dpbusd_avx_epi32(c13, x1, v);
	}
	store4(tail4(_mm_sub_epi32(hsum4(c00, c01, c02, c03), off), a0, w, i, k), s0, ws, bias, d0);
	store4(tail4(_mm_sub_epi32(hsum4(c10, c11, c12, c13), off), a1, w, i, k), s1, ws, bias, d1);
}

#endif

// unit_dpbusd computes one block of outputs with a vpdpbusd kernel pair:
// offsets4 (128·Σw of four weight rows) and rows2x4 (two activation rows
// against those four).
static void unit_dpbusd(__m128i (*offsets4)(const int8_t *, int64_t),
	void (*rows2x4)(const int8_t *, const int8_t *, float, float, const int8_t *, int64_t, __m128i, const float *,
		const float *, float *, float *),
	const int8_t * w, const int8_t * xq, const float * ws, const float * bias, float * dst, int64_t k, int64_t n,
	int64_t r0, int64_t r1, int64_t j0, int64_t j1) {
	const int64_t stride = k + 4;
	int64_t j = j0;
	for (; j + 4 <= j1; j += 4) {
		const float * b = bias ? bias + j : NULL;
		const __m128i off = offsets4(w + j * k, k);
		for (int64_t r = r0; r < r1; r += 2) {
			const int8_t * a0 = xq + r * stride;
			// A last, odd row is computed twice, its second copy into spare.
			const int two = r + 1 < r1;
			const int8_t * a1 = two ? a0 + stride : a0;
			float s0, s1, spare[4];
			memcpy(&s0, a0 + k, sizeof s0);
			memcpy(&s1, a1 + k, sizeof s1);
			rows2x4(a0, a1, s0, s1, w + j * k, k, off, ws + j, b, dst + r * n + j,
				two ? dst + (r + 1) * n + j : spare);
		}
	}
	one_by_one(dot_avx2, w, xq, ws, bias, dst, k, n, r0, r1, j, j1);
}

#endif

void sdt_w8a8_matmul(const int8_t * w, const int8_t * xq, const float * ws, const float * bias, float * dst,
	int64_t k, int64_t n, int64_t rows, int ith, int nth, sdt_w8a8_sched * s) {
	const struct plan p = plan_for(k, n, rows, nth);
	const int64_t units = p.nrb * p.ncb;
	for (int64_t u = units_begin(s, units, ith, nth); u < units; u = units_next(s, u, units, ith, nth)) {
		const int64_t r0 = (u / p.ncb) * p.rb, j0 = (u % p.ncb) * p.nb;
		const int64_t r1 = r0 + p.rb < rows ? r0 + p.rb : rows;
		const int64_t j1 = j0 + p.nb < n ? j0 + p.nb : n;
#if defined(SDT_X86)
		if (level == SDT_W8A8_VNNI) {
			unit_dpbusd(offsets4_vnni, rows2x4_vnni, w, xq, ws, bias, dst, k, n, r0, r1, j0, j1);
			continue;
		}
#if defined(SDT_HAVE_AVXVNNI)
		if (level == SDT_W8A8_AVXVNNI) {
			unit_dpbusd(offsets4_avxvnni, rows2x4_avxvnni, w, xq, ws, bias, dst, k, n, r0, r1, j0, j1);
			continue;
		}
#endif
		if (level == SDT_W8A8_AVX2) {
			unit_avx2(w, xq, ws, bias, dst, k, n, r0, r1, j0, j1);
			continue;
		}
#endif
		one_by_one(dot_generic, w, xq, ws, bias, dst, k, n, r0, r1, j0, j1);
	}
	units_end(s, nth);
}

const char * sdt_w8a8_kernel(void) {
	switch (level) {
	case SDT_W8A8_VNNI:
		return "avx512vnni";
	case SDT_W8A8_AVXVNNI:
		return "avxvnni";
	case SDT_W8A8_AVX2:
		return "avx2";
	}
	return "generic";
}

int sdt_w8a8_use_level(int l) {
	const int was = level;
	if (sdt_w8a8_has_level(l)) {
		level = l;
	}
	return was;
}

//go:build cgo

#include "w8a8.h"

#include <math.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

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

static int8_t code(float v, float inv) {
	long q = lrintf(v * inv); // round half to even, the default mode
	if (q > 127) {
		q = 127;
	} else if (q < -127) {
		q = -127;
	}
	return (int8_t) q;
}

void sdt_w8a8_quantize_row(const float * src, int8_t * out, int64_t k, int group) {
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
	const float scale = amax / 127.0f;
	memcpy(out + k, &scale, sizeof scale);
	if (scale == 0.0f) {
		memset(out, 0, (size_t) k);
		return;
	}
	const float inv = 1.0f / scale;
	if (group == 0) {
		for (int64_t i = 0; i < k; i++) {
			out[i] = code(src[i], inv);
		}
		return;
	}
	// The second pass rotates again rather than keeping a row of floats:
	// the transform costs log4(group) adds per value, less than a buffer's
	// round trip through memory for long rows.
	for (int64_t g = 0; g < k; g += group) {
		memcpy(v, src + g, (size_t) group * sizeof(float));
		rotate_group(v, group);
		for (int i = 0; i < group; i++) {
			out[g + i] = code(v[i], inv);
		}
	}
}

#if defined(__AVX2__)

// hsum returns the sum of the eight int32 lanes of v.
static inline int32_t hsum(__m256i v) {
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

// madd accumulates 32 products of a and b into acc: |a| (unsigned) times b
// with a's sign gives pairs of at most 2·127·127 < 2^15, so the 16-bit
// stage never saturates and the sum is exact (codes are in [-127, 127]).
static inline __m256i madd(__m256i acc, __m256i ua, __m256i a, __m256i b, __m256i ones) {
	const __m256i p = _mm256_maddubs_epi16(ua, _mm256_sign_epi8(b, a));
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
}

static const char * kernel_name = "avx2";

#else

static const char * kernel_name = "generic";

#endif

// dot returns the exact dot product of k codes.
static int32_t dot(const int8_t * a, const int8_t * b, int64_t k) {
	int64_t i = 0;
	int32_t sum = 0;
#if defined(__AVX2__)
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i acc = _mm256_setzero_si256();
	for (; i + 32 <= k; i += 32) {
		const __m256i va = _mm256_loadu_si256((const __m256i *) (a + i));
		const __m256i vb = _mm256_loadu_si256((const __m256i *) (b + i));
		acc = madd(acc, _mm256_sign_epi8(va, va), va, vb, ones);
	}
	sum = hsum(acc);
#endif
	for (; i < k; i++) {
		sum += (int32_t) a[i] * (int32_t) b[i];
	}
	return sum;
}

// dot2x4 computes the dot products of two activation rows with four weight
// rows: out[i*4+j] = a_i·w_j.
static void dot2x4(const int8_t * a0, const int8_t * a1, const int8_t * w0, const int8_t * w1, const int8_t * w2,
	const int8_t * w3, int64_t k, int32_t out[8]) {
	int64_t i = 0;
	int32_t s[8] = {0};
#if defined(__AVX2__)
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00;
	__m256i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
	for (; i + 32 <= k; i += 32) {
		const __m256i x0 = _mm256_loadu_si256((const __m256i *) (a0 + i));
		const __m256i x1 = _mm256_loadu_si256((const __m256i *) (a1 + i));
		const __m256i u0 = _mm256_sign_epi8(x0, x0), u1 = _mm256_sign_epi8(x1, x1);
		__m256i v = _mm256_loadu_si256((const __m256i *) (w0 + i));
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
	s[0] = hsum(c00), s[1] = hsum(c01), s[2] = hsum(c02), s[3] = hsum(c03);
	s[4] = hsum(c10), s[5] = hsum(c11), s[6] = hsum(c12), s[7] = hsum(c13);
#endif
	for (; i < k; i++) {
		const int32_t x0 = a0[i], x1 = a1[i];
		s[0] += x0 * w0[i], s[1] += x0 * w1[i], s[2] += x0 * w2[i], s[3] += x0 * w3[i];
		s[4] += x1 * w0[i], s[5] += x1 * w1[i], s[6] += x1 * w2[i], s[7] += x1 * w3[i];
	}
	memcpy(out, s, sizeof s);
}

// The output is cut into tiles of TILE_R activation rows by TILE_N weight
// rows: a tile's weights (TILE_N·k bytes) stay in cache while its rows
// stream past, and small products (a time embedding's one row) still give
// every thread a tile.
enum { TILE_R = 32, TILE_N = 64 };

static inline float rescale(int32_t sum, float xs, const float * ws, const float * bias, int64_t j) {
	float v = (float) sum * xs;
	v *= ws[j];
	if (bias) {
		v += bias[j];
	}
	return v;
}

void sdt_w8a8_matmul(const int8_t * w, const int8_t * xq, const float * ws, const float * bias, float * dst,
	int64_t k, int64_t n, int64_t rows, int ith, int nth) {
	const int64_t stride = k + 4;
	const int64_t tn = (n + TILE_N - 1) / TILE_N, tr = (rows + TILE_R - 1) / TILE_R;
	for (int64_t t = ith; t < tn * tr; t += nth) {
		const int64_t r0 = (t / tn) * TILE_R, j0 = (t % tn) * TILE_N;
		const int64_t r1 = r0 + TILE_R < rows ? r0 + TILE_R : rows;
		const int64_t j1 = j0 + TILE_N < n ? j0 + TILE_N : n;
		int64_t r = r0;
		for (; r + 2 <= r1; r += 2) {
			const int8_t * a0 = xq + r * stride, * a1 = a0 + stride;
			float s0, s1;
			memcpy(&s0, a0 + k, sizeof s0);
			memcpy(&s1, a1 + k, sizeof s1);
			float * d0 = dst + r * n, * d1 = d0 + n;
			int64_t j = j0;
			for (; j + 4 <= j1; j += 4) {
				int32_t o[8];
				const int8_t * wj = w + j * k;
				dot2x4(a0, a1, wj, wj + k, wj + 2 * k, wj + 3 * k, k, o);
				for (int q = 0; q < 4; q++) {
					d0[j + q] = rescale(o[q], s0, ws, bias, j + q);
					d1[j + q] = rescale(o[4 + q], s1, ws, bias, j + q);
				}
			}
			for (; j < j1; j++) {
				d0[j] = rescale(dot(a0, w + j * k, k), s0, ws, bias, j);
				d1[j] = rescale(dot(a1, w + j * k, k), s1, ws, bias, j);
			}
		}
		for (; r < r1; r++) {
			const int8_t * a = xq + r * stride;
			float s;
			memcpy(&s, a + k, sizeof s);
			for (int64_t j = j0; j < j1; j++) {
				dst[r * n + j] = rescale(dot(a, w + j * k, k), s, ws, bias, j);
			}
		}
	}
}

const char * sdt_w8a8_kernel(void) { return kernel_name; }

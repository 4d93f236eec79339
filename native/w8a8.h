// W8A8 kernels of sdtool's native package (see w8a8.go): per-row INT8
// activation quantization, with the optional Hadamard rotation of ComfyUI's
// convrot layers, and the INT8 x INT8 -> INT32 product rescaled to F32.
#ifndef SDT_W8A8_H
#define SDT_W8A8_H

#include <stdint.h>

// ggml's type id of I8.
#define SDT_GGML_TYPE_I8 24
// The largest rotation group (stable-diffusion.cpp's bound).
#define SDT_W8A8_MAX_GROUP 256

// sdt_w8a8_sched hands an op's blocks to its threads as they ask (a
// thread that the OS holds back takes fewer), the way ggml's own products
// share their chunks. Zeroed before an op's first run; the last thread of
// each run zeroes it again for the next. NULL means a static split.
typedef struct {
	int64_t next;
	int32_t done;
} sdt_w8a8_sched;

// sdt_w8a8_quantize_row writes the k codes of row src to out, then its F32
// scale at out+k (unaligned). group is 0 (no rotation) or a power of 4 up to
// SDT_W8A8_MAX_GROUP dividing k.
void sdt_w8a8_quantize_row(const float * src, int8_t * out, int64_t k, int group);

// sdt_w8a8_quantize_rows quantizes rows of src (k floats each) into out
// (k+4 bytes each), as thread ith of nth.
void sdt_w8a8_quantize_rows(const float * src, int8_t * out, int64_t k, int64_t rows, int group, int ith, int nth,
	sdt_w8a8_sched * s);

// sdt_w8a8_quantize_rows_lv is sdt_w8a8_quantize_rows with codes in
// ±levels and scale absmax/levels (the plain C path; levels 7 is ComfyUI's
// int4 activation of convrot_w4a4).
void sdt_w8a8_quantize_rows_lv(const float * src, int8_t * out, int64_t k, int64_t rows, int group, int levels, int ith,
	int nth, sdt_w8a8_sched * s);

// sdt_w8a8_matmul computes, for the rows of xq (k codes and a scale each,
// k+4 bytes apart) and the n weight rows of w (k codes each), dst[r*n+j] =
// float(dot)·scale_r·ws[j] (+ bias[j] when bias is not NULL). Thread ith of
// nth computes its share of the output's blocks.
void sdt_w8a8_matmul(const int8_t * w, const int8_t * xq, const float * ws, const float * bias, float * dst,
	int64_t k, int64_t n, int64_t rows, int ith, int nth, sdt_w8a8_sched * s);

// The kernel sets, slowest first: plain C, AVX2 (vpmaddubsw), AVX2 with an
// AVX-VNNI product (vpdpbusd on 32 bytes: Intel client CPUs without
// AVX-512, Alder Lake on), and AVX2 with an AVX-512 VNNI product (64
// bytes). A CPU may have the last without the one before (AMD Zen 4).
enum { SDT_W8A8_GENERIC, SDT_W8A8_AVX2, SDT_W8A8_AVXVNNI, SDT_W8A8_VNNI, SDT_W8A8_LEVELS };

// SDT_W8A8_BUILT_AVXVNNI is 1 where the compiler has AVX-VNNI's intrinsics
// (gcc 11, clang 12 and later); older ones build without that kernel set.
#if (defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11)
#define SDT_W8A8_BUILT_AVXVNNI 1
#else
#define SDT_W8A8_BUILT_AVXVNNI 0
#endif

// sdt_w8a8_kernel names the kernel set in use ("avx512vnni", "avxvnni",
// "avx2" or "generic"): the best the CPU has, whatever flags the file was
// compiled with.
const char * sdt_w8a8_kernel(void);

// sdt_w8a8_has_level reports whether this CPU (and compiler) runs kernel
// set l.
int sdt_w8a8_has_level(int l);

// sdt_w8a8_use_level switches to kernel set l where the CPU runs it and
// returns the one in use before; for tests and benchmarks, between graph
// computations.
int sdt_w8a8_use_level(int l);

#endif

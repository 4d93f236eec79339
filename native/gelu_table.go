//go:build cgo

package native

/*
#include <stdint.h>
#include <math.h>

void ggml_cpu_init(void);
uint16_t ggml_fp32_to_fp16(float x);
float ggml_fp16_to_fp32(uint16_t x);
extern uint16_t ggml_table_gelu_f16[1 << 16];

// sdt_gelu_fused is ggml's tanh-approximated GELU as gcc compiles it with
// FMA available and its default contraction (-march on x86-64-v3 and up,
// as stable-diffusion.cpp's builds are): the one multiply-add it fuses,
// 1 + a·x·x, is written out with fmaf, so any build computes the same.
static float sdt_gelu_fused(float x) {
	const float a = 0.044715f;
	const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
	return 0.5f*x*(1.0f + tanhf(sqrt_2_over_pi*x*fmaf(a*x, x, 1.0f)));
}

// sdt_align_gelu_table initialises ggml's CPU backend (it fills its
// tables once) and then refills the GELU table, the f16 lookup that
// ggml's f32 GELU and GEGLU read, with sdt_gelu_fused.
static void sdt_align_gelu_table(void) {
	ggml_cpu_init();
	for (int i = 0; i < (1 << 16); i++) {
		ggml_table_gelu_f16[i] = ggml_fp32_to_fp16(sdt_gelu_fused(ggml_fp16_to_fp32((uint16_t) i)));
	}
}

static uint16_t sdt_gelu_table(int i) { return ggml_table_gelu_f16[i]; }
*/
import "C"

import "sync"

// alignGELU makes ggml's GELU table the one stable-diffusion.cpp's builds
// compute. ggml's f32 GELU (and GEGLU) looks its result up in a table of
// f16 values that ggml_cpu_init computes with the C compiler's arithmetic:
// where gcc may fuse a multiply-add (-march on a CPU with FMA and its
// default -ffp-contract=fast: sd-cli's native and release builds) one
// entry differs from a build without (sdtool's under -ffp-contract=off,
// which keeps ggml's quantizers unfused, or without -march): GELU(-1.999)
// is -0.045502 there, -0.045471 here. A wide MLP hits it now and then, and
// the q8_0 product after it turns that into whole quantization steps (0.8
// dB of Qwen-Image parity, BENCHMARKS.md). It runs once, before the first
// CPU backend starts.
var alignGELU = sync.OnceFunc(func() { C.sdt_align_gelu_table() })

// geluTableEntry returns entry i of ggml's GELU table (f16 bits), for tests.
func geluTableEntry(i int) uint16 { return uint16(C.sdt_gelu_table(C.int(i))) }

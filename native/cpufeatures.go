//go:build cgo

package native

/*
int ggml_cpu_has_avx(void);
int ggml_cpu_has_avx2(void);
int ggml_cpu_has_fma(void);
int ggml_cpu_has_f16c(void);
int ggml_cpu_has_bmi2(void);
int ggml_cpu_has_avx512(void);
int ggml_cpu_has_avx512_vnni(void);
int ggml_cpu_has_avx512_bf16(void);
int ggml_cpu_has_avx_vnni(void);
*/
import "C"

// LinkedX86 lists the x86 instruction-set extensions the linked ggml's CPU
// backend was compiled to use (ggml reports its compile-time flags, not the
// host's), under the names golang.org/x/sys/cpu uses: a binary compiled
// with one of them cannot run on a CPU without it.
func LinkedX86() []string {
	var out []string
	for _, f := range []struct {
		name string
		has  C.int
	}{
		{"AVX", C.ggml_cpu_has_avx()}, {"AVX2", C.ggml_cpu_has_avx2()}, {"FMA", C.ggml_cpu_has_fma()},
		{"F16C", C.ggml_cpu_has_f16c()}, {"BMI2", C.ggml_cpu_has_bmi2()}, {"AVX512F", C.ggml_cpu_has_avx512()},
		{"AVX512VNNI", C.ggml_cpu_has_avx512_vnni()}, {"AVX512BF16", C.ggml_cpu_has_avx512_bf16()},
		{"AVXVNNI", C.ggml_cpu_has_avx_vnni()},
	} {
		if f.has != 0 {
			out = append(out, f.name)
		}
	}
	return out
}

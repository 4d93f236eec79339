//go:build cgo

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/native"
)

// TestQuantizedSameFileSDCLI holds issue 36's item 2 on the full-size
// synthetic SD 1.5: one quantized file, rendered by sd-cli and by generate,
// gives images 50 dB or more apart, as the f16 source does (51.6 dB). Both
// programs quantize activations for these products (q8_0 blocks of 32,
// q8_K rows of 256), so any last-bit difference upstream flips codes, and
// a q8_K row's float scale carries it on: the UNet's GroupNorm epsilon
// (1e-5 against sd.cpp's 1e-6) left q8_0 at 41.9 dB; llamafile's tinyBLAS,
// which the Go module compiles into ggml and sd-cli's ggml does not, 40.2
// dB; the module's q6_K kernel, which splits each block's integer sums
// into other float lanes than sd-cli's, 40.7 dB for a q6_K UNet
// (native's ops_kquant.go); and the attention products' tail, which gcc
// contracts in sd-cli's build, 43.5 dB for the q6_K file
// (native.MulMatDotF32). It needs `go run ./build`'s flags
// (-UGGML_USE_LLAMAFILE) and skips, saying so, under plain `go test`.
// SDTOOL_SAMEFILE_TYPES=a,b picks the cases (default below); "T-unet"
// quantizes the UNet to T and keeps the text encoder f16. Not held yet:
// Q5_K_M (36.9 dB: its q5_1 products, whose min term sd-cli's build
// fuses; BENCHMARKS.md).
func TestQuantizedSameFileSDCLI(t *testing.T) {
	bin, _ := sdcliEnv(t)
	if native.LinkedLlamafile() {
		t.Skip(`the linked ggml has llamafile's kernels, which sd-cli's has not: run with go run ./build's CGO_CFLAGS and CGO_CXXFLAGS (-UGGML_USE_LLAMAFILE)`)
	}
	if _, err := os.Stat(parityMerges); err != nil {
		t.Skipf("no CLIP vocabulary at %s", parityMerges)
	}
	dir := workDir(t, "samefile")
	model := parityModel(t, dir)
	cases := []string{"q8_0", "q6_K", "Q4_K_M", "q4_0", "Q3_K_M", "Q2_K", "q6_K-unet"}
	if v := os.Getenv("SDTOOL_SAMEFILE_TYPES"); v != "" {
		cases = strings.Split(v, ",")
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			typ, unetOnly := strings.CutSuffix(c, "-unet")
			q := filepath.Join(dir, "sd15-"+c+".gguf")
			args := []string{"quantize", model, "--type", typ, "-o", q, "--force"}
			if unetOnly {
				args = append(args, "--tensor-type", `cond_stage_model\..*=f16`)
			}
			if code, _, stderr := runApp(t, args...); code != 0 {
				t.Fatalf("quantize %s: %s", c, stderr)
			}
			psnr, _ := sdtoolVsSDCLI(t, bin, q, dir, "samefile-"+c, defaultParity())
			t.Logf("%s: sdtool vs sd-cli on the same file %.2f dB", c, psnr)
			if psnr < 50 {
				t.Errorf("%s: the same file renders %.2f dB apart in sdtool and sd-cli, want at least 50", c, psnr)
			}
		})
	}
}

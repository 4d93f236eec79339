//go:build cgo

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// BenchmarkGenerateW8A8VsF16 is issue 18's item 4 end to end: the same
// model generated from its float source and from its int8_convrot copy
// (the UNet's linear layers run as W8A8), both loaded once and run in turn
// in one process, so that the ratio of their sampling times is measured
// under one load. The model is the tiny SD 1 (group size 16) unless
// SDTOOL_W8A8_BENCH_MODEL names another (a full-size SD 1.5 from
// `gensynth -arch sd1`, default group size); SDTOOL_W8A8_BENCH_SIZE sets
// the image size (default 64) and SDTOOL_W8A8_BENCH_STEPS the steps
// (default 2); SDTOOL_W8A8_BENCH_INT8 names an int8_convrot copy made
// already (else the benchmark quantizes one into a temporary directory).
// A plain go test compiles ggml without SIMD flags, which makes its F16
// path several times slower than in a binary from `go run ./build` while
// the W8A8 kernels pick AVX2 at run time: the ratio would then flatter
// INT8, so the benchmark refuses such a build; give go test the flags
// `go run ./build -n` prints:
//
//	CGO_CFLAGS="-O3 -march=native -ffp-contract=off" CGO_CXXFLAGS="-O3 -march=native -ffp-contract=off" \
//	SDTOOL_W8A8_BENCH_MODEL=sd15.safetensors go test ./cmd/sdtool -run '^$' -bench W8A8VsF16 -benchtime 2x -timeout 2h
//
// int8/f16 is the ratio of sampling times (below 1: the INT8 path is faster).
func BenchmarkGenerateW8A8VsF16(b *testing.B) {
	if runtime.GOARCH == "amd64" && cpu.X86.HasAVX2 && !slices.Contains(native.LinkedX86(), "AVX2") {
		b.Fatal("ggml was compiled without AVX2 (plain go test): set CGO_CFLAGS and CGO_CXXFLAGS as `go run ./build -n` prints")
	}
	src := os.Getenv("SDTOOL_W8A8_BENCH_MODEL")
	args, tok := []string{}, ""
	if src != "" {
		tok = parityMerges // a synthetic model has no BPE merges; sd-cli builds them in
	} else {
		src = "../../testdata/tiny-sd1.safetensors"
		args = append(args, "--convrot-group-size", "16")
	}
	n := func(env string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
			return v
		}
		return def
	}
	size, steps := n("SDTOOL_W8A8_BENCH_SIZE", 64), n("SDTOOL_W8A8_BENCH_STEPS", 2)
	q := os.Getenv("SDTOOL_W8A8_BENCH_INT8")
	if q == "" {
		q = filepath.Join(b.TempDir(), "int8_convrot.safetensors")
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"sdtool", "quantize", src, "--type", "int8_convrot", "-o", q,
			"--tensor-type", "embedding=keep"}, args...), &stdout, &stderr); code != 0 {
			b.Fatalf("quantize: %s", stderr.String())
		}
	}
	load := func(path string) *infer.Model {
		m, err := infer.Load(infer.Components{Model: path}, infer.LoadOptions{Threads: 2, Tokenizer: tok})
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	f16, int8 := load(src), load(q)
	defer f16.Close()
	defer int8.Close()
	req := infer.Request{Prompt: "a photo of a cat", Width: size, Height: size, Steps: steps, CFGScale: 7, Seed: 42,
		Method: infer.Euler}
	sample := func(m *infer.Model) time.Duration {
		r, err := m.Generate(req)
		if err != nil {
			b.Fatal(err)
		}
		return r.Timings.Sampling
	}
	b.Logf("W8A8 kernel %s, ggml built with %v", native.W8A8Kernel(), native.LinkedX86())
	var t8, t16 time.Duration
	for b.Loop() {
		t8 += sample(int8)
		t16 += sample(f16)
	}
	per := float64(b.N * steps)
	b.ReportMetric(t8.Seconds()/per, "int8-s/step")
	b.ReportMetric(t16.Seconds()/per, "f16-s/step")
	b.ReportMetric(float64(t8)/float64(t16), "int8/f16")
}

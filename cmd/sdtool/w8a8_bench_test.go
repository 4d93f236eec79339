//go:build cgo && unix

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/internal/benchutil"
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
// already (else the benchmark quantizes one into a temporary directory);
// SDTOOL_W8A8_BENCH_THREADS the threads (default 2);
// SDTOOL_W8A8_BENCH_KERNEL a W8A8 kernel other than the best this CPU runs
// (avxvnni, avx2, generic: a smaller CPU's).
// A plain go test compiles ggml without SIMD flags, which makes its F16
// path several times slower than in a binary from `go run ./build` while
// the W8A8 kernels pick AVX2 at run time: the ratio would then flatter
// INT8, so the benchmark refuses such a build; give go test the flags
// `go run ./build -n` prints:
//
//	CGO_CFLAGS="-O3 -march=native -ffp-contract=off -UGGML_USE_LLAMAFILE" CGO_CXXFLAGS="$CGO_CFLAGS" \
//	SDTOOL_W8A8_BENCH_MODEL=sd15.safetensors go test ./cmd/sdtool -run '^$' -bench W8A8VsF16 -benchtime 2x -timeout 2h
//
// int8/f16 is the ratio of sampling times, text encoding included (below
// 1: the INT8 path is faster); each pair's ratio is logged. int8/f16-cpu is the ratio of the process's CPU time over steps
// 2 to the last (steps 2 or more), which other programs on the machine
// change less than the wall time; with one thread it is the work done
// (with two, ggml's threads also spin at its barriers while one waits).
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
	threads := n("SDTOOL_W8A8_BENCH_THREADS", 2)
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
		m, err := infer.Load(infer.Components{"model": path}, infer.LoadOptions{Threads: threads, Tokenizers: map[string]string{"clip": tok}})
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
	// Each generation is stopped after its last step, before the VAE (the
	// same work on both sides, and at 512x512 longer than a step), so that
	// the time goes to more alternations of what differs.
	var t0, tEnd time.Time
	var cpu0, cpuSteps time.Duration
	var cancel context.CancelFunc
	req.OnStep = func(step, steps int) {
		switch step {
		case 1:
			cpu0 = benchutil.CPUTime()
		}
		if step == steps {
			tEnd, cpuSteps = time.Now(), benchutil.CPUTime()-cpu0
			cancel()
		}
	}
	sample := func(m *infer.Model) (wall, cpu time.Duration) {
		req.Context, cancel = context.WithCancel(context.Background())
		t0 = time.Now()
		if _, err := m.Generate(req); !errors.Is(err, infer.ErrInterrupted) {
			b.Fatalf("generate: %v (want it stopped after its last step)", err)
		}
		return tEnd.Sub(t0), cpuSteps
	}
	if k := os.Getenv("SDTOOL_W8A8_BENCH_KERNEL"); k != "" {
		best := native.W8A8Kernel()
		if err := native.UseW8A8Kernel(k); err != nil {
			b.Fatal(err)
		}
		defer native.UseW8A8Kernel(best)
	}
	b.Logf("W8A8 kernel %s, ggml built with %v, %d threads", native.W8A8Kernel(), native.LinkedX86(), threads)
	var t8, t16, c8, c16 time.Duration
	for i := 0; b.Loop(); i++ {
		// The order alternates, so that neither side always runs first.
		var w8, cp8, w16, cp16 time.Duration
		if i%2 == 0 {
			w8, cp8 = sample(int8)
			w16, cp16 = sample(f16)
		} else {
			w16, cp16 = sample(f16)
			w8, cp8 = sample(int8)
		}
		b.Logf("pair %d: int8 %.3f s, f16 %.3f s, int8/f16 %.3f", i+1, w8.Seconds(), w16.Seconds(), float64(w8)/float64(w16))
		t8, c8, t16, c16 = t8+w8, c8+cp8, t16+w16, c16+cp16
	}
	per := float64(b.N * steps)
	b.ReportMetric(t8.Seconds()/per, "int8-s/step")
	b.ReportMetric(t16.Seconds()/per, "f16-s/step")
	b.ReportMetric(float64(t8)/float64(t16), "int8/f16")
	if steps > 1 {
		b.ReportMetric(float64(c8)/float64(c16), "int8/f16-cpu")
	}
}

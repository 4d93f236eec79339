//go:build cgo && unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
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
// already (else the benchmark quantizes one into a temporary directory);
// SDTOOL_W8A8_BENCH_THREADS the threads (default 2).
// A plain go test compiles ggml without SIMD flags, which makes its F16
// path several times slower than in a binary from `go run ./build` while
// the W8A8 kernels pick AVX2 at run time: the ratio would then flatter
// INT8, so the benchmark refuses such a build; give go test the flags
// `go run ./build -n` prints:
//
//	CGO_CFLAGS="-O3 -march=native -ffp-contract=off" CGO_CXXFLAGS="-O3 -march=native -ffp-contract=off" \
//	SDTOOL_W8A8_BENCH_MODEL=sd15.safetensors go test ./cmd/sdtool -run '^$' -bench W8A8VsF16 -benchtime 2x -timeout 2h
//
// int8/f16 is the ratio of sampling times (below 1: the INT8 path is
// faster). int8/f16-cpu is the ratio of the process's CPU time over steps
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
		m, err := infer.Load(infer.Components{Model: path}, infer.LoadOptions{Threads: threads, Tokenizer: tok})
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
	var cpu0, cpuSteps time.Duration
	req.OnStep = func(step, steps int) {
		switch step {
		case 1:
			cpu0 = cpuTime(b)
		case steps:
			cpuSteps = cpuTime(b) - cpu0
		}
	}
	sample := func(m *infer.Model) (wall, cpu time.Duration) {
		r, err := m.Generate(req)
		if err != nil {
			b.Fatal(err)
		}
		return r.Timings.Sampling, cpuSteps
	}
	b.Logf("W8A8 kernel %s, ggml built with %v, %d threads", native.W8A8Kernel(), native.LinkedX86(), threads)
	var t8, t16, c8, c16 time.Duration
	for b.Loop() {
		w, c := sample(int8)
		t8, c8 = t8+w, c8+c
		w, c = sample(f16)
		t16, c16 = t16+w, c16+c
	}
	per := float64(b.N * steps)
	b.ReportMetric(t8.Seconds()/per, "int8-s/step")
	b.ReportMetric(t16.Seconds()/per, "f16-s/step")
	b.ReportMetric(float64(t8)/float64(t16), "int8/f16")
	if steps > 1 {
		b.ReportMetric(float64(c8)/float64(c16), "int8/f16-cpu")
	}
}

// cpuTime returns the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

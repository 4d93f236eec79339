//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/benchutil"
	"github.com/sdtool/sdtool/internal/synth"
)

// loraBenchChild carries one measurement (the sdtool arguments as JSON) to
// the child process of BenchmarkLoRA.
const loraBenchChild = "SDTOOL_LORA_BENCH_CHILD"

// BenchmarkLoRA measures lora extract and the LoRA bake, with and without
// quantizing in the same pass, next to quantize alone on the same base:
// each case runs the command in a fresh child process, which reports the
// base model's MB per wall second and per CPU second and its peak resident
// memory. The default inputs are two synthetic SD1 checkpoints at scale
// 0.2 (80 MB, seeds 1 and 2) in /dev/shm; for the figures of BENCHMARKS.md
// name real-size ones and a directory with room for the outputs:
//
//	SDTOOL_LORA_BENCH_BASE=sd15.safetensors SDTOOL_LORA_BENCH_TUNED=sd15-seed2.safetensors \
//	SDTOOL_LORA_BENCH_DIR=/var/tmp/x go test ./cmd/sdtool -run '^$' -bench LoRA -benchtime 1x -timeout 2h
//
// SDTOOL_LORA_BENCH_RANK sets the extraction rank (default 64); the bakes
// apply the adapter extracted in the first case.
func BenchmarkLoRA(b *testing.B) {
	dir := os.Getenv("SDTOOL_LORA_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			if d, err := os.MkdirTemp("/dev/shm", "sdtool-lorabench"); err == nil {
				dir = d
				b.Cleanup(func() { os.RemoveAll(d) })
			}
		}
	}
	base, tuned := os.Getenv("SDTOOL_LORA_BENCH_BASE"), os.Getenv("SDTOOL_LORA_BENCH_TUNED")
	if base == "" || tuned == "" {
		base, tuned = filepath.Join(dir, "sd1-0.2-1.safetensors"), filepath.Join(dir, "sd1-0.2-2.safetensors")
		for i, p := range []string{base, tuned} {
			if _, err := os.Stat(p); err != nil {
				if err := synth.Write(p, synth.Spec{Arch: "sd1", Scale: 0.2, Seed: int64(i + 1), DType: formats.F16}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	rank := os.Getenv("SDTOOL_LORA_BENCH_RANK")
	if rank == "" {
		rank = "64"
	}
	adapter := filepath.Join(dir, "lora-r"+rank+".safetensors")
	st, err := os.Stat(base)
	if err != nil {
		b.Fatal(err)
	}
	baseMB := float64(st.Size()) / 1e6
	outST, outGGUF := filepath.Join(dir, "out.safetensors"), filepath.Join(dir, "out.gguf")
	bake := func(extra ...string) []string {
		return append([]string{"merge", "--base", base, "--lora", adapter, "--force"}, extra...)
	}
	cases := []struct {
		name string
		args []string
	}{
		{"extract-r" + rank, []string{"lora", "extract", "--base", base, "--tuned", tuned, "--rank", rank, "-o", adapter, "--force"}},
		{"bake-f16", bake("-o", outST)},
		{"bake-q8_0", bake("-o", outGGUF, "--type", "q8_0")},
		{"quantize-q8_0", []string{"quantize", base, "-o", outGGUF, "--type", "q8_0", "--force"}},
		{"bake-Q4_K_M", bake("-o", outGGUF, "--type", "Q4_K_M")},
		{"quantize-Q4_K_M", []string{"quantize", base, "-o", outGGUF, "--type", "Q4_K_M", "--force"}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				args, _ := json.Marshal(c.args)
				vals, err := benchutil.RunChild("TestLoRABenchChild", loraBenchChild+"="+string(args))
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(baseMB, "base-MB")
				b.ReportMetric(vals["BENCH_SECONDS"], "s")
				b.ReportMetric(baseMB/vals["BENCH_SECONDS"], "MB/s")
				b.ReportMetric(baseMB/vals["BENCH_CPU_SECONDS"], "MB/cpu-s")
				b.ReportMetric(vals["BENCH_PEAK_MB"], "peak-RSS-MB")
			}
		})
	}
	os.Remove(outST)
	os.Remove(outGGUF)
}

// TestLoRABenchChild is one measurement of BenchmarkLoRA; it does nothing
// in a normal test run.
func TestLoRABenchChild(t *testing.T) {
	spec := os.Getenv(loraBenchChild)
	if spec == "" {
		t.Skip("runs only as a child of BenchmarkLoRA")
	}
	var args []string
	if err := json.Unmarshal([]byte(spec), &args); err != nil {
		t.Fatal(err)
	}
	benchutil.ResetPeakRSS()
	cpu0 := benchutil.CPUSeconds()
	start := time.Now()
	if code := run(append([]string{"sdtool"}, args...), io.Discard, os.Stderr); code != 0 {
		t.Fatalf("sdtool %s: exit %d", strings.Join(args, " "), code)
	}
	secs := time.Since(start).Seconds()
	cpu := benchutil.CPUSeconds() - cpu0
	fmt.Printf("BENCH_PEAK_MB=%.1f\n", float64(benchutil.PeakRSS())/(1<<20))
	fmt.Printf("BENCH_SECONDS=%.3f\nBENCH_CPU_SECONDS=%.3f\n", secs, cpu)
}

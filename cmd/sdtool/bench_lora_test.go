//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
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
				cmd := exec.Command(os.Args[0], "-test.run=^TestLoRABenchChild$", "-test.v")
				cmd.Env = append(os.Environ(), loraBenchChild+"="+string(args))
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("child: %v\n%s", err, out)
				}
				vals := map[string]float64{}
				sc := bufio.NewScanner(strings.NewReader(string(out)))
				for sc.Scan() {
					if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok && strings.HasPrefix(k, "BENCH_") {
						vals[k], _ = strconv.ParseFloat(v, 64)
					}
				}
				if vals["BENCH_PEAK_MB"] == 0 {
					b.Fatalf("child printed no measurement:\n%s", out)
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
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	cpu0 := processCPU()
	start := time.Now()
	if code := run(append([]string{"sdtool"}, args...), io.Discard, os.Stderr); code != 0 {
		t.Fatalf("sdtool %s: exit %d", strings.Join(args, " "), code)
	}
	secs := time.Since(start).Seconds()
	cpu := processCPU() - cpu0
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			fmt.Printf("BENCH_PEAK_MB=%.1f\n", kb/1024)
		}
	}
	fmt.Printf("BENCH_SECONDS=%.3f\nBENCH_CPU_SECONDS=%.3f\n", secs, cpu)
}

// processCPU returns the user and system CPU seconds of the process.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

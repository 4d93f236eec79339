package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/safetensors"
)

// headerHeavy writes a safetensors file of n zero-size tensors (issue 14,
// item 10: 500k of them in 33 MB once took 789 MB to convert) and returns
// its path and size.
func headerHeavy(b *testing.B, n int) (string, int64) {
	tensors := make([]formats.Tensor, n)
	for i := range tensors {
		tensors[i] = formats.Tensor{Name: fmt.Sprintf("model.diffusion_model.blocks.%d.empty", i), Type: formats.F32, Shape: []int64{0}}
	}
	w, err := safetensors.NewWriter(nil, tensors, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "heavy.safetensors")
	if err := os.WriteFile(path, w.HeaderBytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	return path, int64(len(w.HeaderBytes()))
}

// BenchmarkHeaderHeavy runs inspect, diff and convert on a file of 50k
// empty tensors and reports the peak heap per tensor and per byte of file
// (heap-B/tensor, heap-x-file): a small constant, not a multiple of the
// header.
func BenchmarkHeaderHeavy(b *testing.B) {
	const n = 50_000
	path, size := headerHeavy(b, n)
	out := filepath.Join(b.TempDir(), "out.gguf")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"inspect", []string{"inspect", path, "--no-tensors"}},
		{"diff", []string{"diff", path, path}},
		{"convert", []string{"convert", "-m", path, "-o", out, "--force"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var peak uint64
			for b.Loop() {
				stop := make(chan struct{})
				done := make(chan uint64)
				runtime.GC()
				var base runtime.MemStats
				runtime.ReadMemStats(&base)
				go func() {
					var m runtime.MemStats
					var hi uint64
					for {
						select {
						case <-stop:
							done <- hi
							return
						default:
						}
						runtime.ReadMemStats(&m)
						hi = max(hi, m.HeapAlloc-min(m.HeapAlloc, base.HeapAlloc))
						time.Sleep(time.Millisecond) // ReadMemStats stops the world
					}
				}()
				var o, e bytes.Buffer
				if code := run(append([]string{"sdtool"}, tc.args...), &o, &e); code > 1 {
					b.Fatalf("exit %d: %s", code, e.String())
				}
				close(stop)
				peak = max(peak, <-done)
			}
			b.ReportMetric(float64(peak)/n, "heap-B/tensor")
			b.ReportMetric(float64(peak)/float64(size), "heap-x-file")
		})
	}
}

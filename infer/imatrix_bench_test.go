//go:build cgo

package infer_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sdtool/sdtool/infer"
)

// BenchmarkImatrixOverhead measures what imatrix collection adds to
// generation: each iteration generates the same request without and then
// with collection and the benchmark reports both generation times and their
// ratio ("x-collect", 1.10 = 10% extra; "x-collect-unet+clip" leaves out
// the VAE, which is not collected), measured in one run so that a
// loaded machine still gives a comparable figure. It runs the tiny model at
// 128x128 and, when SDTOOL_BENCH_MODEL names a model (for example
// `go run ./internal/synth/cmd/gensynth -sd sd15 -o /tmp/sd15.gguf`), that
// model at SDTOOL_BENCH_SIZE (default 256) pixels, with one and two threads.
func BenchmarkImatrixOverhead(b *testing.B) {
	type bcase struct {
		name, path string
		size       int
	}
	cases := []bcase{{"tiny-128", "../testdata/tiny-sd1.gguf", 128}}
	if p := os.Getenv("SDTOOL_BENCH_MODEL"); p != "" {
		size := 256
		if s := os.Getenv("SDTOOL_BENCH_SIZE"); s != "" {
			var err error
			if size, err = strconv.Atoi(s); err != nil {
				b.Fatalf("SDTOOL_BENCH_SIZE=%q: %v", s, err)
			}
		}
		cases = append(cases, bcase{"model", p, size})
	}
	for _, c := range cases {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", c.name, threads), func(b *testing.B) {
				m, err := infer.Load(infer.Components{"model": c.path}, infer.LoadOptions{Threads: threads})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				req := infer.Request{Prompt: "a cat", Width: c.size, Height: c.size, Steps: 1, CFGScale: 7, Seed: 1, Method: infer.Euler}
				var plain, collect, plainCore, collectCore time.Duration
				run := func(s *infer.ImatrixStats) (time.Duration, time.Duration) {
					m.SetImatrix(s)
					defer m.SetImatrix(nil)
					t0 := time.Now()
					r, err := m.Generate(req)
					if err != nil {
						b.Fatal(err)
					}
					return time.Since(t0), r.Timings.Text + r.Timings.Sampling
				}
				run(nil) // warm the allocator
				for b.Loop() {
					t, u := run(nil)
					plain, plainCore = plain+t, plainCore+u
					t, u = run(infer.NewImatrixStats())
					collect, collectCore = collect+t, collectCore+u
				}
				n := float64(b.N)
				b.ReportMetric(plain.Seconds()/n, "s-plain")
				b.ReportMetric(collect.Seconds()/n, "s-collect")
				// The whole generation, and the collected part alone (text
				// encoder and sampling, without the VAE decoder).
				b.ReportMetric(collect.Seconds()/plain.Seconds(), "x-collect")
				b.ReportMetric(collectCore.Seconds()/plainCore.Seconds(), "x-collect-unet+clip")
			})
		}
	}
}

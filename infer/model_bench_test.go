//go:build cgo

package infer_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/sdtool/sdtool/infer"
)

// BenchmarkStep measures seconds per sampling step (two UNet evaluations
// with guidance) of the tiny model at 128x128 and, when SDTOOL_BENCH_MODEL
// names a model (for example one from `go run ./internal/synth/cmd/gensynth
// -sd sd15 -o sd15.gguf`), of that model at 256x256.
func BenchmarkStep(b *testing.B) {
	cases := []struct {
		name, path string
		size       int
	}{{"tiny-128", "../testdata/tiny-sd1.gguf", 128}}
	if p := os.Getenv("SDTOOL_BENCH_MODEL"); p != "" {
		cases = append(cases, struct {
			name, path string
			size       int
		}{"model-256", p, 256})
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
				var sampling float64
				for b.Loop() {
					r, err := m.Generate(req)
					if err != nil {
						b.Fatal(err)
					}
					sampling += r.Timings.Sampling.Seconds()
				}
				b.ReportMetric(sampling/float64(b.N), "s/step")
			})
		}
	}
}

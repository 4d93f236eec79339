package convert

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/internal/benchutil"
	"github.com/sdtool/sdtool/pipeline"
)

// BenchmarkConvert converts a synthetic F16 model (SDTOOL_BENCH_MB
// megabytes, default 64) to q8_0 and q4_K the way sd-cli does (weighted
// path with a ones vector), and f16 to f16, with 1 and 2 threads,
// reporting MB/s of input and the run's peak resident memory.
func BenchmarkConvert(b *testing.B) {
	mb, err := benchutil.SizeMB(64)
	if err != nil {
		b.Fatal(err)
	}
	in, size, err := benchutil.F16Model(mb)
	if err != nil {
		b.Fatal(err)
	}
	for _, typ := range []string{"f16", "q8_0", "q4_K"} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", typ, threads), func(b *testing.B) {
				out := filepath.Join(b.TempDir(), "out.gguf")
				canPeak := benchutil.ResetPeakRSS()
				b.SetBytes(size)
				for b.Loop() {
					cfg := &Options{Inputs: map[string]string{"model": in}, Output: out, Type: typ}
					if _, err := run(cfg, pipeline.Options{Threads: threads, Force: true}); err != nil {
						b.Fatal(err)
					}
				}
				if canPeak {
					b.ReportMetric(float64(benchutil.PeakRSS())/(1<<20), "peak-RSS-MiB")
				}
			})
		}
	}
}

// BenchmarkCopyBaseline copies the same input file with io.Copy and fsync,
// the baseline for f16 -> f16 conversion throughput.
func BenchmarkCopyBaseline(b *testing.B) {
	mb, err := benchutil.SizeMB(64)
	if err != nil {
		b.Fatal(err)
	}
	in, size, err := benchutil.F16Model(mb)
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), "copy")
	b.SetBytes(size)
	for b.Loop() {
		src, err := os.Open(in)
		if err != nil {
			b.Fatal(err)
		}
		dst, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			b.Fatal(err)
		}
		dst.Sync()
		dst.Close()
		src.Close()
	}
}

package quantize

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/benchutil"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
)

// benchInput writes the benchmark model (SDTOOL_BENCH_MB megabytes,
// default 128) once per process.
func benchInput(b *testing.B) (string, int64) {
	mb, err := benchutil.SizeMB(128)
	if err != nil {
		b.Fatal(err)
	}
	path, size, err := benchutil.F16Model(mb)
	if err != nil {
		b.Fatal(err)
	}
	return path, size
}

// BenchmarkCodec is the baseline of BenchmarkQuantize: the codec alone on
// the same number of floats (one 512-wide weight in memory, quantized
// repeatedly, single-threaded), so that quantize MB/s over codec MB/s is
// the share of the time spent in the codec rather than in reading,
// decoding f16, scheduling and writing. Bytes are counted as f16 input,
// as in BenchmarkQuantize.
func BenchmarkCodec(b *testing.B) {
	const rows, cols = 512, 512
	src := make([]float32, rows*cols)
	for i := range src {
		src[i] = float32((i*7919)%1000-500) / 5000
	}
	for _, t := range []formats.DType{formats.Q8_0, formats.Q4_K} {
		b.Run(t.String(), func(b *testing.B) {
			rb, _ := t.RowBytes(cols)
			dst := make([]byte, rows*rb)
			b.SetBytes(2 * rows * cols)
			for b.Loop() {
				if err := quant.QuantizeRows(t, dst, src, cols, nil, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQuantize quantizes a synthetic F16 model (SDTOOL_BENCH_MB, default
// 128 MB) to q8_0 and q4_K with 1 and 2 threads, reporting MB/s of input
// and the peak resident memory of the run (peak-RSS-MiB; 0 where the peak
// cannot be reset).
func BenchmarkQuantize(b *testing.B) {
	in, size := benchInput(b)
	for _, typ := range []string{"q8_0", "q4_K"} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", typ, threads), func(b *testing.B) {
				out := filepath.Join(b.TempDir(), "out.gguf")
				canPeak := benchutil.ResetPeakRSS()
				b.SetBytes(size)
				for b.Loop() {
					opts := Options{Input: in, Output: out, Type: typ}
					if _, err := quantizeRun(context.Background(), &opts, pipeline.Options{Threads: threads, Force: true, MaxMemory: 256 << 20}, false); err != nil {
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

package quantize

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/quant"
)

// benchSpec returns a synthetic F16 Flux-layout model (rows of 512, so
// q4_K applies to every linear weight) with as many blocks as fit in
// SDTOOL_BENCH_MB megabytes (default 128, at most 1024).
func benchSpec(b *testing.B) synth.Spec {
	mb := int64(128)
	if s := os.Getenv("SDTOOL_BENCH_MB"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 || v > 1024 {
			b.Fatalf("SDTOOL_BENCH_MB=%q: want 1..1024", s)
		}
		mb = v
	}
	best := synth.Spec{Arch: "flux", Scale: 1.0 / 6, Depth: 1, DType: formats.F16, Seed: 3}
	for d := 1; d <= 38; d++ {
		s := best
		s.Depth = d
		n, err := synth.Params(s)
		if err != nil {
			b.Fatal(err)
		}
		if 2*n > mb<<20 {
			break
		}
		best = s
	}
	return best
}

var benchFile struct {
	path string
	size int64
}

// benchInput writes the benchmark model once per process.
func benchInput(b *testing.B) (string, int64) {
	if benchFile.path != "" {
		return benchFile.path, benchFile.size
	}
	dir, err := os.MkdirTemp("", "sdtool-quantize-bench")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "bench-f16.safetensors")
	if err := synth.Write(path, benchSpec(b)); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	benchFile.path, benchFile.size = path, st.Size()
	return path, st.Size()
}

// resetPeakRSS clears the kernel's high-water mark of resident memory
// (Linux: "5" in /proc/self/clear_refs), so that each benchmark reports
// its own peak; it reports false where that is not possible.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS returns VmHWM from /proc/self/status in bytes, 0 when unknown.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
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
				canPeak := resetPeakRSS()
				b.SetBytes(size)
				for b.Loop() {
					opts := Options{Input: in, Output: out, Type: typ, Threads: threads, Force: true, MaxMemory: 256 << 20}
					if _, err := Run(context.Background(), &opts); err != nil {
						b.Fatal(err)
					}
				}
				if canPeak {
					b.ReportMetric(float64(peakRSS())/(1<<20), "peak-RSS-MiB")
				}
			})
		}
	}
}

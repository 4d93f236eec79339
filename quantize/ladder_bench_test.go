package quantize

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sdtool/sdtool/internal/benchutil"
	"github.com/sdtool/sdtool/pipeline"
)

// BenchmarkLadder writes the ladder (Q8_0 ... Q2_K and
// int8_convrot) of the benchmark model (SDTOOL_BENCH_MB, default 128) in
// one pass, then runs quantize once per type on the same model in the same
// iteration, and reports separate/ladder (the wall-time ratio, above 1
// when the ladder is faster), the same ratio of CPU time (user plus
// system, steadier on a shared machine), the bytes read by read calls
// over the input's size (ladder-reads/input, separate-reads/input) and
// the peak resident memory of each
// (ladder-peak-RSS-MiB, separate-peak-RSS-MiB; 0 where the peak cannot be
// reset). Both use 2 threads and --max-memory 256MiB.
func BenchmarkLadder(b *testing.B) {
	in, size := benchInput(b)
	types := []string{"Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K", "int8_convrot"}
	ro := pipeline.Options{Threads: 2, Force: true, MaxMemory: 256 << 20}
	dir := b.TempDir()
	var ladder, separate, ladderCPU, separateCPU time.Duration
	var ladderPeak, separatePeak, ladderRead, separateRead int64
	canPeak := benchutil.ResetPeakRSS()
	b.SetBytes(size)
	for b.Loop() {
		benchutil.ResetPeakRSS()
		start, cpu, read := time.Now(), benchutil.CPUTime(), readBytes()
		opts := Options{Input: in, Output: filepath.Join(dir, "ladder-{type}.{ext}")}
		l, err := PlanLadder(&opts, types)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Run(context.Background(), ro); err != nil {
			b.Fatal(err)
		}
		l.Close()
		ladder += time.Since(start)
		ladderCPU += benchutil.CPUTime() - cpu
		ladderRead += readBytes() - read
		ladderPeak = max(ladderPeak, benchutil.PeakRSS())
		benchutil.ResetPeakRSS()
		start, cpu, read = time.Now(), benchutil.CPUTime(), readBytes()
		for _, typ := range types {
			o := Options{Input: in, Output: OutputPath(filepath.Join(dir, "single-{type}.{ext}"), typ, formatOf(typ)), Type: typ}
			if _, err := quantizeRun(context.Background(), &o, ro, false); err != nil {
				b.Fatal(err)
			}
		}
		separate += time.Since(start)
		separateCPU += benchutil.CPUTime() - cpu
		separateRead += readBytes() - read
		separatePeak = max(separatePeak, benchutil.PeakRSS())
		b.StopTimer()
		es, _ := os.ReadDir(dir)
		for _, e := range es {
			os.Remove(filepath.Join(dir, e.Name()))
		}
		b.StartTimer()
	}
	b.ReportMetric(separate.Seconds()/ladder.Seconds(), "separate/ladder")
	if ladderCPU > 0 {
		b.ReportMetric(separateCPU.Seconds()/ladderCPU.Seconds(), "separate-cpu/ladder-cpu")
	}
	b.ReportMetric(ladder.Seconds()/float64(b.N), "ladder-s/op")
	b.ReportMetric(separate.Seconds()/float64(b.N), "separate-s/op")
	if ladderRead > 0 {
		b.ReportMetric(float64(ladderRead)/float64(b.N)/float64(size), "ladder-reads/input")
		b.ReportMetric(float64(separateRead)/float64(b.N)/float64(size), "separate-reads/input")
	}
	if canPeak {
		b.ReportMetric(float64(ladderPeak)/(1<<20), "ladder-peak-RSS-MiB")
		b.ReportMetric(float64(separatePeak)/(1<<20), "separate-peak-RSS-MiB")
	}
}

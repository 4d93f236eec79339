//go:build linux

package merge

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/benchutil"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
)

// benchEnv selects the synthetic inputs of BenchmarkMergePeakRSS as
// comma-separated ARCH:SCALE items. The default, sd1 at 0.2 and 0.5, gives
// inputs of 80 and 394 MiB (F16); "sdxl:0.6" gives two 4 GiB inputs, and
// SDTOOL_MERGE_BENCH_DIR puts the files on a disk instead of /dev/shm:
//
//	SDTOOL_MERGE_BENCH=sd1:0.2,sdxl:0.6 SDTOOL_MERGE_BENCH_DIR=/var/tmp go test ./merge -run '^$' -bench PeakRSS -benchtime 1x -timeout 1h
const benchEnv = "SDTOOL_MERGE_BENCH"

// childEnv carries one measurement to the child process: METHOD:ARCH:SCALE:DIR.
const childEnv = "SDTOOL_MERGE_BENCH_CHILD"

// BenchmarkMergePeakRSS merges two synthetic checkpoints (same
// architecture, different seeds) with weighted_sum and ties, each size and
// method in a fresh child process, and reports the input MB/s (per wall
// second and per CPU second) and the child's peak resident memory during
// the merge, which must not grow with the inputs.
func BenchmarkMergePeakRSS(b *testing.B) {
	specs := os.Getenv(benchEnv)
	if specs == "" {
		specs = "sd1:0.2,sd1:0.5"
	}
	dir := b.TempDir()
	if d := os.Getenv(benchEnv + "_DIR"); d != "" {
		dir = d // large runs: a disk with room for two inputs and the output
	} else if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		// tmpfs: no disk in the measurement; ReadAt'd pages are not the process's RSS.
		if d, err := os.MkdirTemp("/dev/shm", "sdtool-mergebench"); err == nil {
			dir = d
			b.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	for _, item := range strings.Split(specs, ",") {
		for _, method := range []Method{WeightedSum, TIES} {
			b.Run(fmt.Sprintf("%s/%s", method, item), func(b *testing.B) {
				for b.Loop() {
					vals, err := benchutil.RunChild("TestMergeBenchChild", fmt.Sprintf("%s=%s:%s:%s", childEnv, method, item, dir))
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(vals["BENCH_INPUT_MB"], "input-MB")
					b.ReportMetric(vals["BENCH_MBPS"], "MB/s")
					b.ReportMetric(vals["BENCH_MB_PER_CPU_S"], "MB/cpu-s")
					b.ReportMetric(vals["BENCH_PEAK_MB"], "peak-RSS-MB")
				}
			})
		}
	}
}

// TestMergeBenchChild is one measurement of BenchmarkMergePeakRSS; it does
// nothing in a normal test run.
func TestMergeBenchChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("runs only as a child of BenchmarkMergePeakRSS")
	}
	parts := strings.SplitN(spec, ":", 4)
	if len(parts) != 4 {
		t.Fatalf("bad %s %q", childEnv, spec)
	}
	scale, err := strconv.ParseFloat(parts[2], 64)
	if err != nil {
		t.Fatal(err)
	}
	var paths [2]string
	var inBytes int64
	for i := range paths {
		s := synth.Spec{Arch: parts[1], Scale: scale, Seed: int64(i + 1), DType: formats.F16}
		paths[i] = filepath.Join(parts[3], fmt.Sprintf("%s-%s-%d.safetensors", parts[1], parts[2], i))
		if _, err := os.Stat(paths[i]); err != nil {
			if err := synth.Write(paths[i], s); err != nil {
				t.Fatal(err)
			}
		}
		st, _ := os.Stat(paths[i])
		inBytes += st.Size()
	}
	out := filepath.Join(parts[3], "merged.safetensors")
	defer os.Remove(out)
	// Measure the merge alone: the generation above had its own peak.
	benchutil.ResetPeakRSS()
	cpu0 := benchutil.CPUSeconds()
	start := time.Now()
	p, err := PlanArithmetic(&Arithmetic{Method: Method(parts[0]), A: paths[0], B: paths[1], Density: 0.2}, out)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := pipeline.Run(context.Background(), p, pipeline.Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	secs := time.Since(start).Seconds()
	cpu := benchutil.CPUSeconds() - cpu0
	fmt.Printf("BENCH_PEAK_MB=%.1f\n", float64(benchutil.PeakRSS())/(1<<20))
	fmt.Printf("BENCH_INPUT_MB=%.1f\nBENCH_MBPS=%.1f\nBENCH_MB_PER_CPU_S=%.1f\n", float64(inBytes)/1e6, float64(inBytes)/1e6/secs, float64(inBytes)/1e6/cpu)
}

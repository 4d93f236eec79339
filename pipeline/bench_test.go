package pipeline

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/tensor"
)

// benchDir is where benchmarks put their files: $SDTOOL_BENCH_DIR, else
// /dev/shm (so that a disk's speed does not hide the pipeline's), else a
// temporary directory.
func benchDir(b *testing.B) string {
	if d := os.Getenv("SDTOOL_BENCH_DIR"); d != "" {
		return d
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "sdtool-bench")
		if err == nil {
			b.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return b.TempDir()
}

// BenchmarkCopyThroughput copies a ~256 MB F16 file (64 tensors of 4 MiB)
// through the pipeline (Copy producers, ordered writes, fsync, rename) and,
// in the same iteration, with a plain io.Copy plus fsync of the same bytes;
// "ratio" is the pipeline's speed over the copy's (target: at least 0.8),
// "best_ratio" the same for the fastest iteration of each.
func BenchmarkCopyThroughput(b *testing.B) {
	dir := benchDir(b)
	const ntensors, rows, cols = 64, 512, 4096
	const tsize = rows * cols * 2
	in := filepath.Join(dir, "in.raw")
	f, err := os.Create(in)
	if err != nil {
		b.Fatal(err)
	}
	block := f16Data(tsize/2, 5)
	for range ntensors {
		if _, err := f.Write(block); err != nil {
			b.Fatal(err)
		}
	}
	m := &fileModel{f: f}
	var plan Plan
	for i := range int64(ntensors) {
		t := formats.Tensor{Name: fmt.Sprintf("t%d", i), Type: formats.F16, Shape: []int64{rows, cols}, File: in, Offset: i * tsize, Size: tsize}
		m.tensors = append(m.tensors, t)
		plan.Outputs = append(plan.Outputs, Output{Name: t.Name, Type: t.Type, Shape: t.Shape, Producer: Copy(m, t)})
	}
	total := int64(ntensors * tsize)
	b.SetBytes(total)
	var tPipe, tCopy time.Duration
	bestPipe, bestCopy := time.Duration(1<<62), time.Duration(1<<62)
	b.ResetTimer()
	for b.Loop() {
		out := filepath.Join(dir, "out.fake")
		start := time.Now()
		if err := Run(context.Background(), at(&plan, out, newFakeWriter, []string{in}...), Options{Force: true}); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		tPipe, bestPipe = tPipe+d, min(bestPipe, d)

		start = time.Now()
		if err := plainCopy(in, filepath.Join(dir, "copy.raw")); err != nil {
			b.Fatal(err)
		}
		d = time.Since(start)
		tCopy, bestCopy = tCopy+d, min(bestCopy, d)
	}
	b.StopTimer()
	mb := float64(total) * float64(b.N) / 1e6
	b.ReportMetric(mb/tPipe.Seconds(), "pipeline_MB/s")
	b.ReportMetric(mb/tCopy.Seconds(), "copy_MB/s")
	b.ReportMetric(tCopy.Seconds()/tPipe.Seconds(), "ratio")
	// On a shared machine noise only ever adds time, so the best runs
	// compare the two more fairly than the totals.
	b.ReportMetric(bestCopy.Seconds()/bestPipe.Seconds(), "best_ratio")
	f.Close()
}

// plainCopy is the baseline: io.Copy from one file to another and fsync,
// the same durability the pipeline gives.
func plainCopy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// BenchmarkManySmallTensors measures the per-tensor overhead of the engine
// (dispatch, worker hand-off, ordered write) on 2000 tiny tensors, the bulk
// of a diffusion checkpoint's tensor count.
func BenchmarkManySmallTensors(b *testing.B) {
	dir := benchDir(b)
	m := newMemModel("in.mem")
	var plan Plan
	for i := range 2000 {
		t := m.add(fmt.Sprintf("blocks.%d.norm.bias", i), formats.F32, []int64{320}, make([]byte, 1280))
		plan.Outputs = append(plan.Outputs, Output{Name: t.Name, Type: t.Type, Shape: t.Shape, Producer: Copy(m, t)})
	}
	out := filepath.Join(dir, "small.fake")
	for b.Loop() {
		if err := Run(context.Background(), at(&plan, out, newFakeWriter), Options{Force: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2000, "µs/tensor")
}

// BenchmarkConvertThreads converts 64 MiB of F16 with the toy codec on 1
// and 2 threads, to show that producers scale with the worker count.
func BenchmarkConvertThreads(b *testing.B) {
	dir := benchDir(b)
	m := newMemModel("in.mem")
	var plan Plan
	for i := range 8 {
		t := m.add(fmt.Sprintf("w%d", i), formats.F16, []int64{1024, 4096}, f16Data(1024*4096, uint32(i)))
		plan.Outputs = append(plan.Outputs, Output{Name: t.Name, Type: toyType, Shape: t.Shape, Producer: Convert(tensor.Plain(m, t), toyType, encodeToy)})
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			b.SetBytes(64 << 20)
			out := filepath.Join(dir, "conv.fake")
			for b.Loop() {
				if err := Run(context.Background(), at(&plan, out, newFakeWriter), Options{Force: true, Threads: threads}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

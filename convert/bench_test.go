package convert

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sdtool/sdtool/internal/benchutil"
	"github.com/sdtool/sdtool/pipeline"
)

// childEnv makes the test binary a one-shot converter: "IN|OUT|TYPE|THREADS"
// converts IN to OUT as `sdtool convert -m IN -o OUT --type TYPE --threads
// THREADS` does and exits, so that BenchmarkConvertVsSDCLI can time and
// measure sdtool in a process of its own, as it does sd-cli.
const childEnv = "SDTOOL_CONVERT_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(convertChild(spec))
	}
	os.Exit(m.Run())
}

func convertChild(spec string) int {
	f := strings.Split(spec, "|")
	if len(f) != 4 {
		fmt.Fprintf(os.Stderr, "%s=%q: want IN|OUT|TYPE|THREADS\n", childEnv, spec)
		return 2
	}
	threads, err := strconv.Atoi(f[3])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: threads: %v\n", childEnv, err)
		return 2
	}
	opts := &Options{Inputs: map[string]string{"model": f[0]}, Output: f[1], Type: f[2]}
	if _, err := run(opts, pipeline.Options{Threads: threads, Force: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

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

// BenchmarkConvertVsSDCLI converts the same synthetic F16 model
// (SDTOOL_BENCH_MB megabytes, default 256) with sdtool and with sd-cli
// (`sd-cli -M convert -m IN -o OUT --type T -t N`, the binary named by
// SDTOOL_SDCLI; skipped without it), each in a process of its own,
// alternating the two every iteration. It reports the ratio of the median
// wall times (sdtool/sd-cli-time below 1: sdtool is faster) and of the
// median CPU times (sdtool/sd-cli-cpu), the median peak resident memory of
// each process (getrusage's maxrss), and fails when the two outputs differ. SDTOOL_BENCH_THREADS sets the threads (default 2);
// the outputs go to /dev/shm when it exists, so that the disk (and
// sdtool's fsync, which sd-cli does not do) stays out of the timing.
func BenchmarkConvertVsSDCLI(b *testing.B) {
	sdcli := os.Getenv("SDTOOL_SDCLI")
	if sdcli == "" {
		b.Skip("set SDTOOL_SDCLI to an sd-cli binary to compare with it")
	}
	mb, err := benchutil.SizeMB(256)
	if err != nil {
		b.Fatal(err)
	}
	threads := 2
	if v := os.Getenv("SDTOOL_BENCH_THREADS"); v != "" {
		if threads, err = strconv.Atoi(v); err != nil || threads < 1 {
			b.Fatalf("SDTOOL_BENCH_THREADS=%q: want a positive count", v)
		}
	}
	in, size, err := benchutil.F16Model(mb)
	if err != nil {
		b.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err = os.MkdirTemp("/dev/shm", "sdtool-bench"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	for _, typ := range []string{"q8_0", "q4_K", "q5_K", "q6_K", "q3_K", "q2_K", "q4_0"} {
		b.Run(fmt.Sprintf("%s/threads=%d", typ, threads), func(b *testing.B) {
			outGo := filepath.Join(dir, "sdtool-"+typ+".gguf")
			outC := filepath.Join(dir, "sdcli-"+typ+".gguf")
			var goT, cT, goCPU, cCPU []time.Duration
			var goRSS, cRSS []int64
			b.SetBytes(size)
			for b.Loop() {
				sdtool := exec.Command(self, "-test.run=^$")
				sdtool.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{in, outGo, typ, strconv.Itoa(threads)}, "|"))
				d, cpu, rss := runMeasured(b, sdtool)
				goT, goCPU, goRSS = append(goT, d), append(goCPU, cpu), append(goRSS, rss)
				d, cpu, rss = runMeasured(b, exec.Command(sdcli, "-M", "convert", "-m", in, "-o", outC, "--type", typ, "-t", strconv.Itoa(threads)))
				cT, cCPU, cRSS = append(cT, d), append(cCPU, cpu), append(cRSS, rss)
			}
			b.StopTimer()
			b.ReportMetric(float64(median(goT))/float64(median(cT)), "sdtool/sd-cli-time")
			b.ReportMetric(float64(median(goCPU))/float64(median(cCPU)), "sdtool/sd-cli-cpu")
			b.ReportMetric(float64(median(goRSS))/(1<<20), "sdtool-peak-RSS-MiB")
			b.ReportMetric(float64(median(cRSS))/(1<<20), "sd-cli-peak-RSS-MiB")
			b.ReportMetric(median(goT).Seconds(), "sdtool-s")
			b.ReportMetric(median(cT).Seconds(), "sd-cli-s")
			if a, c := fileDigest(b, outGo), fileDigest(b, outC); a != c {
				b.Errorf("%s: sdtool's output differs from sd-cli's", typ)
			}
			os.Remove(outGo)
			os.Remove(outC)
		})
	}
}

// runMeasured runs cmd and returns its wall time, its CPU time (user and
// system, which a loaded machine's waiting does not inflate) and its peak
// resident memory.
func runMeasured(b *testing.B, cmd *exec.Cmd) (time.Duration, time.Duration, int64) {
	b.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s: %v\n%s", cmd.Path, err, stderr.Bytes())
	}
	ps := cmd.ProcessState
	return time.Since(t0), ps.UserTime() + ps.SystemTime(), benchutil.ChildPeakRSS(ps)
}

// median returns the middle value of v (the upper one of an even count).
func median[T int64 | time.Duration](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// fileDigest returns the SHA-256 of a file.
func fileDigest(b *testing.B, path string) [32]byte {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		b.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

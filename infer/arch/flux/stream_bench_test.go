//go:build cgo

package flux

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
)

// streamChildEnv carries BenchmarkStreamVsSDCLI's run to its child process.
const streamChildEnv = "SDTOOL_STREAM_CHILD"

// streamRun is one generation of the streaming benchmark.
type streamRun struct {
	fluxParityRun
	// Budget is the memory budget (0: every weight resident).
	Budget int64
}

// streamModel is synth.FluxFull (every width of Flux.1 dev, T5-XXL's
// included) with the DiT's block counts of SDTOOL_STREAM_BLOCKS
// ("double,single", default "3,6") and its linear weights in BF16, as the
// released checkpoint stores them, and SDTOOL_STREAM_T5_LAYERS T5 layers
// (default 2; the release has 24). SDTOOL_STREAM_BLOCKS=19,38 with
// SDTOOL_STREAM_T5_LAYERS=24 is Flux.1 dev at full depth (33 GB of files).
func streamModel(tb testing.TB) (synth.Flux, string) {
	c := synth.FluxFull
	c.Double, c.Single, c.Quant = 3, 6, formats.BF16
	if s := os.Getenv("SDTOOL_STREAM_BLOCKS"); s != "" {
		d, sg, _ := strings.Cut(s, ",")
		var err1, err2 error
		c.Double, err1 = strconv.Atoi(d)
		c.Single, err2 = strconv.Atoi(sg)
		if err1 != nil || err2 != nil {
			tb.Fatalf("SDTOOL_STREAM_BLOCKS=%q: want DOUBLE,SINGLE", s)
		}
	}
	name := fmt.Sprintf("flux-stream-%d-%d", c.Double, c.Single)
	if s := os.Getenv("SDTOOL_STREAM_T5_LAYERS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			tb.Fatalf("SDTOOL_STREAM_T5_LAYERS=%q: want a layer count", s)
		}
		t5 := *c.T5 // FluxFull's T5 is shared: change a copy
		t5.Layers = n
		c.T5 = &t5
		name += fmt.Sprintf("-t5-%d", n)
	}
	return c, name
}

// TestStreamGenerateChild is BenchmarkStreamVsSDCLI's child process: one
// generation of the run in $SDTOOL_STREAM_CHILD, printing its seconds per
// step, so that the parent reads the child's peak memory alone.
func TestStreamGenerateChild(t *testing.T) {
	spec := os.Getenv(streamChildEnv)
	if spec == "" {
		t.Skip("runs as BenchmarkStreamVsSDCLI's child process")
	}
	var r streamRun
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		t.Fatal(err)
	}
	m, err := infer.Load(r.components(), infer.LoadOptions{Threads: r.Threads, MaxMemory: r.Budget})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(r.request())
	if err != nil {
		t.Fatal(err)
	}
	st := m.Memory()
	fmt.Fprintf(os.Stderr, "memory: %+v\n", st)
	b, _ := json.Marshal(inferutil.ChildReport{PerStep: res.Timings.Sampling.Seconds() / float64(res.Timings.Steps)})
	fmt.Printf("CHILD %s\n", b)
}

// dropPageCache asks the kernel to forget the files' cached pages (clean
// pages go; no privilege needed), so that the next run reads the disk.
func dropPageCache(tb testing.TB, paths map[string]string) {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			tb.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			tb.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkStreamVsSDCLI runs one Flux dev generation (128x128, 2 Euler
// steps, SDTOOL_BENCH_THREADS threads, default 2) of streamModel's
// component files (kept in SDTOOL_FLUX_PARITY_DIR between runs) in a fresh
// process per mode and reports seconds per step (weights read while
// sampling included) and peak RSS: sdtool with every weight resident
// (resident; within SDTOOL_STREAM_FIT when set, a budget that holds the
// DiT, so that the text encoders make room for it), within
// SDTOOL_STREAM_BUDGET (default 2GiB; stream), the same
// with the files dropped from the page cache first (stream-cold), and
// sd-cli as is (sdcli), with --params-backend disk (sdcli-disk, and
// sdcli-disk-cold) and with --mmap (sdcli-mmap). SDTOOL_STREAM_MODES
// picks modes (comma-separated); "files" only writes the model's files.
// streamOverrides lists the other settings.
func BenchmarkStreamVsSDCLI(b *testing.B) {
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		b.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	c, name := streamModel(b)
	r := streamRun{fluxParityRun: fluxParityRun{Parts: fluxParityModel(b, c, name, true), Size: 128, Steps: 2, Seed: 42, Guidance: 3.5, Threads: 2}, Budget: 2 << 30}
	streamOverrides(b, &r)
	if s := os.Getenv("SDTOOL_STREAM_BUDGET"); s != "" {
		n, err := pipeline.ParseBytes(s)
		if err != nil {
			b.Fatal(err)
		}
		r.Budget = n
	}
	var fit int64 // the resident mode's budget
	if s := os.Getenv("SDTOOL_STREAM_FIT"); s != "" {
		n, err := pipeline.ParseBytes(s)
		if err != nil {
			b.Fatal(err)
		}
		fit = n
	}
	modes := []string{"resident", "stream", "stream-cold", "sdcli", "sdcli-disk", "sdcli-disk-cold", "sdcli-mmap"}
	if s := os.Getenv("SDTOOL_STREAM_MODES"); s != "" {
		modes = strings.Split(s, ",")
	}
	dir := b.TempDir()
	for _, mode := range modes {
		if mode == "files" {
			b.Logf("files: %v", r.Parts)
			continue
		}
		b.Run(mode, func(b *testing.B) {
			var step float64
			var peak int64
			n := 0
			for b.Loop() {
				if strings.HasSuffix(mode, "-cold") {
					dropPageCache(b, r.Parts)
				}
				var s float64
				var p int64
				switch strings.TrimSuffix(mode, "-cold") {
				case "resident", "stream":
					run := r
					if mode == "resident" {
						run.Budget = fit
					}
					s, p = streamChild(b, run)
				case "sdcli":
					s, p = inferutil.SDCLIStepAndPeak(b, bin, r.sdcliArgs(filepath.Join(dir, "sdcli.png")), r.Steps)
				case "sdcli-disk":
					s, p = sdcliTotalStep(b, bin, append(r.sdcliArgs(filepath.Join(dir, "sdcli.png")), "--params-backend", "disk"), r.Steps)
				case "sdcli-mmap":
					s, p = sdcliTotalStep(b, bin, append(r.sdcliArgs(filepath.Join(dir, "sdcli.png")), "--mmap"), r.Steps)
				default:
					b.Fatalf("unknown mode %q", mode)
				}
				step += s
				peak = max(peak, p)
				n++
			}
			b.ReportMetric(step/float64(n), "s/step")
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
		})
	}
}

// streamOverrides applies BenchmarkStreamVsSDCLI's other settings:
// SDTOOL_BENCH_THREADS, SDTOOL_STREAM_STEPS, and SDTOOL_STREAM_PARTS
// ("FLAG=PATH,..."), component files that replace streamModel's (a
// quantized copy of its DiT or T5, say).
func streamOverrides(b *testing.B, r *streamRun) {
	for env, dst := range map[string]*int{"SDTOOL_BENCH_THREADS": &r.Threads, "SDTOOL_STREAM_STEPS": &r.Steps} {
		if s := os.Getenv(env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				b.Fatalf("%s=%q: want a positive count", env, s)
			}
			*dst = n
		}
	}
	for kv := range strings.SplitSeq(os.Getenv("SDTOOL_STREAM_PARTS"), ",") {
		if kv == "" {
			continue
		}
		flag, path, ok := strings.Cut(kv, "=")
		if _, known := r.Parts[flag]; !ok || !known {
			b.Fatalf("SDTOOL_STREAM_PARTS: %q: want FLAG=PATH with FLAG one of %v", kv, synth.FluxParts)
		}
		r.Parts[flag] = path
	}
}

// streamChild runs TestStreamGenerateChild and returns its seconds per step and peak RSS.
func streamChild(b *testing.B, r streamRun) (float64, int64) {
	spec, _ := json.Marshal(r)
	cmd := exec.Command(os.Args[0], "-test.run=^TestStreamGenerateChild$", "-test.v")
	cmd.Env = append(os.Environ(), streamChildEnv+"="+string(spec))
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("child: %v\n%s", err, inferutil.Tail(out))
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "memory: ") {
			b.Log(line)
		}
		if j, ok := strings.CutPrefix(line, "CHILD "); ok {
			var rep inferutil.ChildReport
			if err := json.Unmarshal([]byte(j), &rep); err != nil {
				b.Fatal(err)
			}
			return rep.PerStep, inferutil.MaxRSS(cmd.ProcessState)
		}
	}
	b.Fatalf("child printed no report:\n%s", inferutil.Tail(out))
	return 0, 0
}

// sdcliTotalStep runs sd-cli and returns its sampling time per step with
// the weights it reads while sampling (a disk or mmap backend's cost) and
// its peak RSS.
func sdcliTotalStep(b *testing.B, bin string, args []string, steps int) (float64, int64) {
	cmd := exec.Command(bin, args...)
	log, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
	}
	m := inferutil.SDCLISampling.FindSubmatch(log)
	if m == nil {
		b.Fatalf("sd-cli logged no sampling time:\n%s", inferutil.Tail(log))
	}
	s, _ := strconv.ParseFloat(string(m[1]), 64)
	return s / float64(steps), inferutil.MaxRSS(cmd.ProcessState)
}

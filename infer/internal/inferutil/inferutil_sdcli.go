//go:build cgo

package inferutil

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/native"
)

// SharedCLIPMerges is CLIP's merges in the shared data folder
// (FindSharedData), which the sd-cli parity tests give both sides.
var SharedCLIPMerges = FindSharedData("clip_bpe_merges.txt")

// SDCLIBinary is the sd-cli that SDTOOL_SDCLI names, skipping the test or
// benchmark when it is unset, when the shared CLIP vocabulary is missing, or
// (tests only) when the linked ggml is not built as sd-cli's is.
func SDCLIBinary(tb testing.TB) string {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		// Parity renders take minutes; benchmarks ask for them explicitly.
		longtest.Skip(t, "parity against sd-cli")
	}
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		tb.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	// A benchmark may compare builds on purpose (llamafile on and off): it only warns.
	RequireParityBuild(tb)
	if _, err := os.Stat(SharedCLIPMerges); err != nil {
		tb.Skipf("no CLIP vocabulary at %s", SharedCLIPMerges)
	}
	return bin
}

// RequireParityBuild skips a test, and warns in a benchmark, when the
// linked ggml does not compute as sd-cli's does (native.ParityBuild): its
// figures would measure the build, not sdtool.
func RequireParityBuild(tb testing.TB) {
	tb.Helper()
	if err := native.ParityBuild(); err != nil {
		if _, ok := tb.(*testing.T); ok {
			tb.Skip(err)
		}
		tb.Logf("warning: %v", err)
	}
}

// MaxRSS is a finished child's peak resident memory in bytes (Linux reports KiB).
func MaxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}

func Tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func ReadPNGFile(tb testing.TB, path string) image.Image {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		tb.Fatal(err)
	}
	return img
}

// ChildReport is what the child prints.
type ChildReport struct {
	PerStep float64
}

// SDCLIStepSeconds is sd-cli's seconds per sampling step from its log: the
// logged sampling time less the weights it loaded lazily inside it.
func SDCLIStepSeconds(tb testing.TB, log []byte, steps int) float64 {
	var sampling, lazy float64
	window := false
	sc := bufio.NewScanner(strings.NewReader(string(log)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "generating image:"):
			window = true
		case window && sdcliLoading.MatchString(line):
			v, _ := strconv.ParseFloat(sdcliLoading.FindStringSubmatch(line)[1], 64)
			lazy += v
		case SDCLISampling.MatchString(line):
			// Wan 2.2 A14B logs its high-noise expert's sampling first.
			v, _ := strconv.ParseFloat(SDCLISampling.FindStringSubmatch(line)[1], 64)
			sampling += v
			window = false
		}
	}
	if sampling == 0 {
		tb.Fatalf("sd-cli logged no sampling time:\n%s", Tail(log))
	}
	return (sampling - lazy) / float64(steps)
}

func CopyFile(tb testing.TB, from, to string) {
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o644)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

func WritePNGFile(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReportChild is a benchmark child's work: it generates req and prints
// its seconds per step for benchVsSDCLI.
func ReportChild(t *testing.T, comps infer.Components, opt infer.LoadOptions, req infer.Request) {
	// Only img2img and references encode: generate leaves the VAE's encoder out otherwise.
	opt.VAEDecodeOnly = opt.VAEDecodeOnly || req.Init == nil && len(req.Refs) == 0
	m, err := infer.Load(comps, AsGenerate(opt))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(ChildReport{PerStep: res.Timings.Sampling.Seconds() / float64(res.Timings.Steps)})
	fmt.Printf("CHILD %s\n", b)
}

// AsGenerate gives opt what generate sets for one image when it has no
// budget of its own: a budget larger than any test model (weights read as
// graphs need them) and one part held at a time (LoadOptions.PartsInTurn),
// so that a benchmark child's peak RSS is generate's.
func AsGenerate(opt infer.LoadOptions) infer.LoadOptions {
	if opt.MaxMemory == 0 {
		opt.MaxMemory, opt.PartsInTurn = 1<<40, true
	}
	return opt
}

// SDCLIBench is one side-by-side benchmark: sd-cli's arguments and steps,
// and the child test that runs sdtool's side from the spec in env.
type SDCLIBench struct {
	Args       []string
	Steps      int
	Child, Env string
	Spec       []byte
}

// BenchVsSDCLI alternates one sd-cli run and one sdtool run (each in a
// fresh process) and reports both sides' seconds per step and peak RSS
// and their ratios, measured in one run.
func BenchVsSDCLI(b *testing.B, bin string, sb SDCLIBench) {
	var cliStep, ourStep, cliCPU, ourCPU float64
	var cliPeak, ourPeak int64
	n := 0
	for b.Loop() {
		s, p, cpu := SDCLIRun(b, bin, sb.Args, sb.Steps)
		cliStep, cliCPU = cliStep+s, cliCPU+cpu
		cliPeak = max(cliPeak, p)
		cmd := exec.Command(os.Args[0], "-test.run=^"+sb.Child+"$", "-test.v")
		cmd.Env = append(os.Environ(), sb.Env+"="+string(sb.Spec))
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, Tail(out))
		}
		found := false
		for _, line := range strings.Split(string(out), "\n") {
			if j, ok := strings.CutPrefix(line, "CHILD "); ok {
				var rep ChildReport
				if err := json.Unmarshal([]byte(j), &rep); err != nil {
					b.Fatal(err)
				}
				ourStep += rep.PerStep
				found = true
			}
		}
		if !found {
			b.Fatalf("child printed no report:\n%s", Tail(out))
		}
		ourPeak = max(ourPeak, MaxRSS(cmd.ProcessState))
		ourCPU += CPUSeconds(cmd.ProcessState)
		n++
	}
	b.ReportMetric(cliStep/float64(n), "sdcli-s/step")
	b.ReportMetric(ourStep/float64(n), "sdtool-s/step")
	b.ReportMetric(ourStep/cliStep, "step-ratio")
	b.ReportMetric(float64(cliPeak)/(1<<20), "sdcli-peak-MiB")
	b.ReportMetric(float64(ourPeak)/(1<<20), "sdtool-peak-MiB")
	b.ReportMetric(float64(ourPeak)/float64(cliPeak), "rss-ratio")
	// Whole runs (loading, text encoder, VAE included): CPU seconds hold
	// on a loaded machine where the wall clock does not.
	b.ReportMetric(cliCPU/float64(n), "sdcli-cpu-s")
	b.ReportMetric(ourCPU/float64(n), "sdtool-cpu-s")
	b.ReportMetric(ourCPU/cliCPU, "cpu-ratio")
}

// SDCLIStepAndPeak runs sd-cli with args and returns its seconds per
// sampling step (the sampling time it logs, less the weights it loads
// lazily inside it) and its peak resident memory.
func SDCLIStepAndPeak(tb testing.TB, bin string, args []string, steps int) (float64, int64) {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	log, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("sd-cli: %v\n%s", err, Tail(log))
	}
	return SDCLIStepSeconds(tb, log, steps), MaxRSS(cmd.ProcessState)
}

// ChromaSDCLI returns sd-cli's path, skipping without it.
func ChromaSDCLI(tb testing.TB) string {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		longtest.Skip(t, "Chroma parity against sd-cli")
	}
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		tb.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	return bin
}

// GenerateParts loads comps, runs req and returns the image and the family that ran it.
func GenerateParts(tb testing.TB, comps infer.Components, opt infer.LoadOptions, req infer.Request) (image.Image, *infer.Family) {
	tb.Helper()
	m, err := infer.Load(comps, opt)
	if err != nil {
		tb.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(req)
	if err != nil {
		tb.Fatal(err)
	}
	img, err := infer.ImageFromCHW(res.Pixels, res.Width, res.Height)
	if err != nil {
		tb.Fatal(err)
	}
	return img, m.Family
}

var (
	SDCLISampling = regexp.MustCompile(`sampling(?:\(high noise\))? completed, taking ([0-9.]+)s`)
	sdcliLoading  = regexp.MustCompile(`loading tensors completed, taking ([0-9.]+)s`)
)

// ComparePNG returns the PSNR of img against sd-cli's PNG at ref; when the
// environment variable keep names a folder, it first copies both images
// there as NAME-sdcli.png and NAME-sdtool.png (sdcli.png and sdtool.png
// for an empty name), to look at.
func ComparePNG(tb testing.TB, ref string, img image.Image, keep, name string) float64 {
	tb.Helper()
	if d := os.Getenv(keep); d != "" {
		prefix := ""
		if name != "" {
			prefix = name + "-"
		}
		CopyFile(tb, ref, filepath.Join(d, prefix+"sdcli.png"))
		if err := WritePNGFile(filepath.Join(d, prefix+"sdtool.png"), img); err != nil {
			tb.Fatal(err)
		}
	}
	psnr, err := metrics.PSNR(ReadPNGFile(tb, ref), img)
	if err != nil {
		tb.Fatal(err)
	}
	return psnr
}

// SDCLIRun is SDCLIStepAndPeak that also returns the process's CPU seconds
// (user and system), a measure that other programs on the machine disturb
// far less than the wall clock: the benchmarks against sd-cli report its
// ratio beside the step time's.
func SDCLIRun(tb testing.TB, bin string, args []string, steps int) (step float64, peak int64, cpu float64) {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	log, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("sd-cli: %v\n%s", err, Tail(log))
	}
	return SDCLIStepSeconds(tb, log, steps), MaxRSS(cmd.ProcessState), CPUSeconds(cmd.ProcessState)
}

// CPUSeconds is a finished process's user and system CPU time in seconds.
func CPUSeconds(ps *os.ProcessState) float64 {
	return (ps.UserTime() + ps.SystemTime()).Seconds()
}

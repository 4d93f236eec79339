//go:build cgo

package infer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"
)

const sharedCLIPMerges = "../../shared/data/clip_bpe_merges.txt"

func sdcliBinary(tb testing.TB) string {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		// Parity renders take minutes; benchmarks ask for them explicitly.
		longtest.Skip(t, "parity against sd-cli")
	}
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		tb.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	if _, err := os.Stat(sharedCLIPMerges); err != nil {
		tb.Skipf("no CLIP vocabulary at %s", sharedCLIPMerges)
	}
	return bin
}

// maxRSS is a finished child's peak resident memory in bytes (Linux reports KiB).
func maxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func readPNGFile(tb testing.TB, path string) image.Image {
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

// childReport is what the child prints.
type childReport struct {
	PerStep float64
}

// sdcliStepSeconds is sd-cli's seconds per sampling step from its log: the
// logged sampling time less the weights it loaded lazily inside it.
func sdcliStepSeconds(tb testing.TB, log []byte, steps int) float64 {
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
		case sdcliSampling.MatchString(line):
			sampling, _ = strconv.ParseFloat(sdcliSampling.FindStringSubmatch(line)[1], 64)
			window = false
		}
	}
	if sampling == 0 {
		tb.Fatalf("sd-cli logged no sampling time:\n%s", tail(log))
	}
	return (sampling - lazy) / float64(steps)
}

func copyFile(tb testing.TB, from, to string) {
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o644)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

func writePNGFile(path string, img image.Image) error {
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

// reportChild is a benchmark child's work: it generates req and prints
// its seconds per step for benchVsSDCLI.
func reportChild(t *testing.T, comps Components, opt LoadOptions, req Request) {
	m, err := Load(comps, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(childReport{PerStep: res.Timings.Sampling.Seconds() / float64(res.Timings.Steps)})
	fmt.Printf("CHILD %s\n", b)
}

// sdcliBench is one side-by-side benchmark: sd-cli's arguments and steps,
// and the child test that runs sdtool's side from the spec in env.
type sdcliBench struct {
	args       []string
	steps      int
	child, env string
	spec       []byte
}

// benchVsSDCLI alternates one sd-cli run and one sdtool run (each in a
// fresh process) and reports both sides' seconds per step and peak RSS
// and their ratios, measured in one run.
func benchVsSDCLI(b *testing.B, bin string, sb sdcliBench) {
	var cliStep, ourStep float64
	var cliPeak, ourPeak int64
	n := 0
	for b.Loop() {
		s, p := sdcliStepAndPeak(b, bin, sb.args, sb.steps)
		cliStep += s
		cliPeak = max(cliPeak, p)
		cmd := exec.Command(os.Args[0], "-test.run=^"+sb.child+"$", "-test.v")
		cmd.Env = append(os.Environ(), sb.env+"="+string(sb.spec))
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, tail(out))
		}
		found := false
		for _, line := range strings.Split(string(out), "\n") {
			if j, ok := strings.CutPrefix(line, "CHILD "); ok {
				var rep childReport
				if err := json.Unmarshal([]byte(j), &rep); err != nil {
					b.Fatal(err)
				}
				ourStep += rep.PerStep
				found = true
			}
		}
		if !found {
			b.Fatalf("child printed no report:\n%s", tail(out))
		}
		ourPeak = max(ourPeak, maxRSS(cmd.ProcessState))
		n++
	}
	b.ReportMetric(cliStep/float64(n), "sdcli-s/step")
	b.ReportMetric(ourStep/float64(n), "sdtool-s/step")
	b.ReportMetric(ourStep/cliStep, "step-ratio")
	b.ReportMetric(float64(cliPeak)/(1<<20), "sdcli-peak-MiB")
	b.ReportMetric(float64(ourPeak)/(1<<20), "sdtool-peak-MiB")
	b.ReportMetric(float64(ourPeak)/float64(cliPeak), "rss-ratio")
}

// sdcliStepAndPeak runs sd-cli with args and returns its seconds per
// sampling step (the sampling time it logs, less the weights it loads
// lazily inside it) and its peak resident memory.
func sdcliStepAndPeak(tb testing.TB, bin string, args []string, steps int) (float64, int64) {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	log, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("sd-cli: %v\n%s", err, tail(log))
	}
	return sdcliStepSeconds(tb, log, steps), maxRSS(cmd.ProcessState)
}

// chromaSDCLI returns sd-cli's path, skipping without it.
func chromaSDCLI(tb testing.TB) string {
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

// generateParts loads comps, runs req and returns the image and the family that ran it.
func generateParts(tb testing.TB, comps Components, opt LoadOptions, req Request) (image.Image, *Family) {
	tb.Helper()
	m, err := Load(comps, opt)
	if err != nil {
		tb.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(req)
	if err != nil {
		tb.Fatal(err)
	}
	img, err := ImageFromCHW(res.Pixels, res.Width, res.Height)
	if err != nil {
		tb.Fatal(err)
	}
	return img, m.Family
}

var (
	sdcliSampling = regexp.MustCompile(`sampling completed, taking ([0-9.]+)s`)
	sdcliLoading  = regexp.MustCompile(`loading tensors completed, taking ([0-9.]+)s`)
)

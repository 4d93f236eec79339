//go:build cgo

package flux

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/internal/synth"
)

// Flux image parity against sd-cli (SDTOOL_SDCLI; skipped without it) on
// synth.FluxParity written as the four component files people download:
// the DiT at full width with one block of each kind, the full CLIP-L and
// VAE, T5-XXL at full width with two layers. The prompt is empty: sd-cli's
// build stubs T5's vocabulary, so its T5 sees </s> and padding whatever
// the prompt, and so does sdtool's for the empty prompt.

// fluxParityRun is one Flux generation's settings, pinned on both sides.
type fluxParityRun struct {
	Parts    map[string]string
	Prompt   string
	Size     int
	Steps    int
	Seed     uint64
	Guidance float32
	Threads  int
	// CFG is the --cfg-scale (0: 1, no negative pass).
	CFG float32
}

// cfg is the run's CFG scale.
func (r fluxParityRun) cfg() float32 {
	if r.CFG == 0 {
		return 1
	}
	return r.CFG
}

func (r fluxParityRun) sdcliArgs(out string) []string {
	var args []string
	for _, flag := range synth.FluxParts {
		if p, ok := r.Parts[flag]; ok {
			args = append(args, "--"+flag, p)
		}
	}
	return append(args, "-p", r.Prompt, "-W", strconv.Itoa(r.Size), "-H", strconv.Itoa(r.Size),
		"--steps", strconv.Itoa(r.Steps), "-s", strconv.FormatUint(r.Seed, 10), "--sampling-method", "euler",
		"--scheduler", "flux", "--cfg-scale", strconv.FormatFloat(float64(r.cfg()), 'g', -1, 32), "--guidance", strconv.FormatFloat(float64(r.Guidance), 'g', -1, 32),
		"--rng", "cuda", "-t", strconv.Itoa(r.Threads), "-b", "1", "-o", out, "-v")
}

func (r fluxParityRun) components() infer.Components {
	c := infer.Components{}
	for _, flag := range synth.FluxParts {
		if p, ok := r.Parts[flag]; ok {
			c[flag] = p
		}
	}
	return c
}

func (r fluxParityRun) request() infer.Request {
	return infer.Request{Prompt: r.Prompt, Width: r.Size, Height: r.Size, Steps: r.Steps, CFGScale: r.cfg(), Guidance: r.Guidance,
		Seed: r.Seed, RNG: infer.RNGCUDA, Method: infer.Euler, Scheduler: SchedulerFlux}
}

// fluxParityModel writes c (dev, or schnell without guidance_in) as
// component files into a temporary folder, or takes the folder in
// SDTOOL_FLUX_PARITY_DIR (written there once and reused).
func fluxParityModel(tb testing.TB, c synth.Flux, name string, dev bool) map[string]string {
	tb.Helper()
	name += "-dev"
	if !dev {
		c.Guidance = false
		name = strings.TrimSuffix(name, "-dev") + "-schnell"
	}
	dir := os.Getenv("SDTOOL_FLUX_PARITY_DIR")
	if dir == "" {
		dir = tb.TempDir()
	} else if parts, ok := existingParts(dir, name); ok {
		return parts
	}
	parts, err := c.WriteParts(dir, name, "safetensors")
	if err != nil {
		tb.Fatal(err)
	}
	return parts
}

// existingParts finds an earlier WriteParts' files.
func existingParts(dir, name string) (map[string]string, bool) {
	parts := map[string]string{}
	for _, flag := range synth.FluxParts {
		p := filepath.Join(dir, name+"-"+flag+".safetensors")
		if _, err := os.Stat(p); err != nil {
			return nil, false
		}
		parts[flag] = p
	}
	return parts, true
}

func runFluxSDCLI(tb testing.TB, bin string, r fluxParityRun, out string) {
	tb.Helper()
	cmd := exec.Command(bin, r.sdcliArgs(out)...)
	log, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
	}
}

func testFluxParity(t *testing.T, dev bool) {
	bin := inferutil.SDCLIBinary(t) // skips without sd-cli or CLIP's real vocabulary
	c, name := synth.FluxParity, "flux-parity"
	if os.Getenv("SDTOOL_FLUX_FULL") != "" {
		c, name = synth.FluxFull, "flux-full"
	}
	r := fluxParityRun{Parts: fluxParityModel(t, c, name, dev), Size: 128, Steps: 4, Seed: 42, Guidance: 3.5, Threads: 2}
	for _, flag := range strings.Fields(os.Getenv("SDTOOL_FLUX_DROP")) {
		delete(r.Parts, flag) // debugging: sd-cli and sdtool both condition on zeros in its place
	}
	out := filepath.Join(t.TempDir(), "sdcli.png")
	runFluxSDCLI(t, bin, r, out)
	ref := inferutil.ReadPNGFile(t, out)
	if d := os.Getenv("SDTOOL_FLUX_PARITY_DIR"); d != "" {
		inferutil.CopyFile(t, out, filepath.Join(d, "sdcli.png"))
	}
	// CLIP's real vocabulary, as sd-cli has it built in (the files embed a small one).
	img, fam := inferutil.GenerateParts(t, r.components(), infer.LoadOptions{Threads: r.Threads, Tokenizers: map[string]string{"clip": inferutil.SharedCLIPMerges}}, r.request())
	if d := os.Getenv("SDTOOL_FLUX_PARITY_DIR"); d != "" {
		if err := inferutil.WritePNGFile(filepath.Join(d, "sdtool.png"), img); err != nil {
			t.Fatal(err)
		}
	}
	psnr, err := metrics.PSNR(ref, img)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sdtool vs sd-cli, %s, 128x128, 4 euler steps: PSNR %.2f dB", fam.Title, psnr)
	if psnr < 50 {
		t.Errorf("PSNR %.2f dB against sd-cli, want at least 50", psnr)
	}
}

func TestFluxDevMatchesSDCLI(t *testing.T)     { testFluxParity(t, true) }
func TestFluxSchnellMatchesSDCLI(t *testing.T) { testFluxParity(t, false) }

// fluxChildEnv carries a fluxParityRun to TestFluxGenerateChild.
const fluxChildEnv = "SDTOOL_FLUX_CHILD"

// TestFluxGenerateChild is BenchmarkFluxVsSDCLI's child process: one
// generation of the run in $SDTOOL_FLUX_CHILD, printing its seconds per
// step, so that the parent reads the child's peak memory alone.
func TestFluxGenerateChild(t *testing.T) {
	spec := os.Getenv(fluxChildEnv)
	if spec == "" {
		t.Skip("runs as BenchmarkFluxVsSDCLI's child process")
	}
	var r fluxParityRun
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		t.Fatal(err)
	}
	opts := infer.LoadOptions{Threads: r.Threads}
	if _, ok := r.Parts["clip_l"]; ok {
		opts.Tokenizers = map[string]string{"clip": inferutil.SharedCLIPMerges}
	}
	inferutil.ReportChild(t, r.components(), opts, r.request())
}

// BenchmarkFluxVsSDCLI alternates one sd-cli run and one sdtool run (each
// in a fresh process) of the same Flux dev generation on synth.FluxFull's
// component files (SDTOOL_FLUX_PARITY_DIR keeps them between runs; 128x128,
// 4 Euler steps, SDTOOL_BENCH_THREADS threads, default 2) and reports both
// sides' seconds per step and peak RSS and their ratios, measured in one run.
func BenchmarkFluxVsSDCLI(b *testing.B) {
	bin := inferutil.SDCLIBinary(b)
	r := fluxParityRun{Parts: fluxParityModel(b, synth.FluxFull, "flux-full", true), Size: 128, Steps: 4, Seed: 42, Guidance: 3.5, Threads: 2}
	if s := os.Getenv("SDTOOL_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		r.Threads = n
	}
	benchFluxVsSDCLI(b, bin, r)
}

// benchFluxVsSDCLI is BenchmarkFluxVsSDCLI's loop for any run of a Flux-layout model.
func benchFluxVsSDCLI(b *testing.B, bin string, r fluxParityRun) {
	spec, _ := json.Marshal(r)
	inferutil.BenchVsSDCLI(b, bin, inferutil.SDCLIBench{Args: r.sdcliArgs(filepath.Join(b.TempDir(), "sdcli.png")), Steps: r.Steps,
		Child: "TestFluxGenerateChild", Env: fluxChildEnv, Spec: spec})
}

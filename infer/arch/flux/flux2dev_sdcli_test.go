//go:build cgo

package flux

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
)

// Flux.2 dev image parity against sd-cli (SDTOOL_SDCLI; skipped without it)
// on synth.DevParity: dev's depth (48 single blocks, which is how sd.cpp
// tells dev) at a narrow width, and Mistral Small 3.x at full width with
// two layers, as the component files people download. sd-cli's Mistral
// vocabulary is a stub in the shared build (every piece of text becomes
// id 0, BOS stays 1), so sdtool gets synth.MistralUnkVocab, which cuts the
// same number of tokens, and the parity LLM's embedding gives every id
// but BOS row 0's values: any prompt then reaches both DiTs as the same
// context. Tekken's real ids are text's TestTekkenReal.

// devParityRun is one dev generation's settings, pinned on both sides.
type devParityRun struct {
	Parts    map[string]string // by flag
	Prompt   string
	Size     int
	Steps    int
	Guidance float32
	Seed     uint64
	Threads  int
}

func (r devParityRun) sdcliArgs(out string) []string {
	var args []string
	for _, flag := range synth.Flux2Parts {
		args = append(args, "--"+flag, r.Parts[flag])
	}
	return append(args, "-p", r.Prompt, "-W", strconv.Itoa(r.Size), "-H", strconv.Itoa(r.Size),
		"--steps", strconv.Itoa(r.Steps), "-s", strconv.FormatUint(r.Seed, 10), "--sampling-method", "euler",
		"--scheduler", "flux2", "--cfg-scale", "1", "--guidance", strconv.FormatFloat(float64(r.Guidance), 'g', -1, 32),
		"--rng", "cuda", "-t", strconv.Itoa(r.Threads), "-b", "1", "-o", out, "-v")
}

func (r devParityRun) request() infer.Request {
	return infer.Request{Prompt: r.Prompt, Width: r.Size, Height: r.Size, Steps: r.Steps, CFGScale: 1, Guidance: r.Guidance,
		Seed: r.Seed, RNG: infer.RNGCUDA, Method: infer.Euler, Scheduler: SchedulerFlux2}
}

func (r devParityRun) components() infer.Components {
	return infer.Components{"diffusion-model": r.Parts["diffusion-model"], "llm": r.Parts["llm"], "vae": r.Parts["vae"]}
}

// devParity is the run both the test and the benchmark render.
func devParity(parts map[string]string) devParityRun {
	return devParityRun{Parts: parts, Prompt: "a lovely cat", Size: 128, Steps: 2, Guidance: 4, Seed: 42, Threads: 2}
}

// devSDCLI returns sd-cli's path and the files of synth.DevParity as the
// comparison needs them (MistralUnkVocab embedded, UnkRowsFrom 2), written
// into a temporary folder or SDTOOL_DEV_PARITY_DIR (once, then reused),
// skipping without sd-cli (and outside the long tests).
func devSDCLI(tb testing.TB) (string, map[string]string) {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		longtest.Skip(t, "Flux.2 dev parity against sd-cli")
	}
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		tb.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	inferutil.RequireParityBuild(tb)
	c := synth.DevParity
	c.LLM.Tokenizer, c.LLM.UnkRowsFrom = synth.MistralUnkVocab(), 2
	dir := os.Getenv("SDTOOL_DEV_PARITY_DIR")
	if dir == "" {
		dir = tb.TempDir()
	}
	parts := map[string]string{}
	for _, flag := range synth.Flux2Parts {
		parts[flag] = filepath.Join(dir, "dev-parity-"+flag+".gguf")
		if _, err := os.Stat(parts[flag]); err != nil {
			var err error
			if parts, err = c.WriteParts(dir, "dev-parity", "gguf"); err != nil {
				tb.Fatal(err)
			}
			break
		}
	}
	return bin, parts
}

// TestDevMatchesSDCLI renders synth.DevParity on both sides (128x128, two
// Euler steps, guidance 4): at least 50 dB.
func TestDevMatchesSDCLI(t *testing.T) {
	bin, parts := devSDCLI(t)
	r := devParity(parts)
	out := filepath.Join(t.TempDir(), "sdcli.png")
	if log, err := exec.Command(bin, r.sdcliArgs(out)...).CombinedOutput(); err != nil {
		t.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
	}
	m, err := infer.Load(r.components(), infer.LoadOptions{Threads: r.Threads})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Family.Name() != "flux2-dev" {
		t.Fatalf("family %s, want flux2-dev", m.Family.Name())
	}
	res, err := m.Generate(r.request())
	if err != nil {
		t.Fatal(err)
	}
	img, err := infer.ImageFromCHW(res.Pixels, res.Width, res.Height)
	if err != nil {
		t.Fatal(err)
	}
	psnr := inferutil.ComparePNG(t, out, img, "SDTOOL_DEV_PARITY_DIR", "")
	t.Logf("sdtool vs sd-cli, Flux.2 dev, prompt %q, %dx%d, %d euler steps, guidance %g: PSNR %.2f dB", r.Prompt, r.Size, r.Size, r.Steps, r.Guidance, psnr)
	if psnr < 50 {
		t.Errorf("PSNR %.2f dB, want at least 50", psnr)
	}
}

// devChildEnv carries a devParityRun to TestDevGenerateChild.
const devChildEnv = "SDTOOL_DEV_CHILD"

// TestDevGenerateChild is BenchmarkDevVsSDCLI's child process: one
// generation of the run in $SDTOOL_DEV_CHILD, printing its seconds per step.
func TestDevGenerateChild(t *testing.T) {
	spec := os.Getenv(devChildEnv)
	if spec == "" {
		t.Skip("runs as BenchmarkDevVsSDCLI's child process")
	}
	var r devParityRun
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		t.Fatal(err)
	}
	// txt2img: generate leaves the VAE's encoder unloaded, as sd-cli does.
	inferutil.ReportChild(t, r.components(), infer.LoadOptions{Threads: r.Threads, VAEDecodeOnly: true}, r.request())
}

// BenchmarkDevVsSDCLI alternates one sd-cli run and one sdtool run (each in
// a fresh process) of TestDevMatchesSDCLI's generation on synth.DevParity's
// files (SDTOOL_DEV_PARITY_DIR keeps them; SDTOOL_BENCH_THREADS threads,
// default 2) and reports both sides' seconds per step and peak RSS and
// their ratios, measured in one run.
func BenchmarkDevVsSDCLI(b *testing.B) {
	longtest.Skip(b, "Flux.2 dev against sd-cli")
	bin, parts := devSDCLI(b)
	r := devParity(parts)
	if s := os.Getenv("SDTOOL_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		r.Threads = n
	}
	spec, _ := json.Marshal(r)
	inferutil.BenchVsSDCLI(b, bin, inferutil.SDCLIBench{Args: r.sdcliArgs(filepath.Join(b.TempDir(), "sdcli.png")), Steps: r.Steps,
		Child: "TestDevGenerateChild", Env: devChildEnv, Spec: spec})
}

//go:build cgo

package flux

import (
	"encoding/json"
	"image"
	"image/color"
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

// Flux.2 klein image parity against sd-cli (SDTOOL_SDCLI and
// SDTOOL_QWEN_TOKENIZER; skipped without them) on synth.KleinParity: the
// DiT at klein 4B's width with one block of each kind and Qwen3-4B at full
// width with two layers, as the component files people download.

// kleinParityRun is one klein generation's settings, pinned on both sides.
type kleinParityRun struct {
	Parts    map[string]string // by flag
	Init     string            // an init PNG for img2img, "" for txt2img
	Strength float32           // img2img's strength
	Refs     []string          // reference PNGs (-r)
	Prompt   string
	Size     int
	Steps    int
	Seed     uint64
	Threads  int
}

func (r kleinParityRun) sdcliArgs(out string) []string {
	var args []string
	for _, flag := range synth.Flux2Parts {
		args = append(args, "--"+flag, r.Parts[flag])
	}
	if r.Init != "" {
		args = append(args, "-i", r.Init, "--strength", strconv.FormatFloat(float64(r.Strength), 'g', -1, 32))
	}
	for _, ref := range r.Refs {
		args = append(args, "-r", ref)
	}
	return append(args, "-p", r.Prompt, "-W", strconv.Itoa(r.Size), "-H", strconv.Itoa(r.Size),
		"--steps", strconv.Itoa(r.Steps), "-s", strconv.FormatUint(r.Seed, 10), "--sampling-method", "euler",
		"--scheduler", "flux2", "--cfg-scale", "1", "--rng", "cuda", "-t", strconv.Itoa(r.Threads), "-b", "1", "-o", out, "-v")
}

func (r kleinParityRun) request(tb testing.TB) infer.Request {
	req := infer.Request{Prompt: r.Prompt, Width: r.Size, Height: r.Size, Steps: r.Steps, CFGScale: 1,
		Seed: r.Seed, RNG: infer.RNGCUDA, Method: infer.Euler, Scheduler: SchedulerFlux2}
	if r.Init != "" {
		req.Init, _, _ = infer.CHWFromImage(inferutil.ReadPNGFile(tb, r.Init))
		req.Strength = r.Strength
	}
	for _, ref := range r.Refs {
		pix, w, h := infer.CHWFromImage(inferutil.ReadPNGFile(tb, ref))
		req.Refs = append(req.Refs, infer.RefImage{Pixels: pix, Width: w, Height: h})
	}
	return req
}

// kleinParityModel writes c's component files into a temporary folder, or
// into SDTOOL_KLEIN_PARITY_DIR (written there once and reused).
func kleinParityModel(tb testing.TB, c synth.Flux2, name string) map[string]string {
	tb.Helper()
	dir := os.Getenv("SDTOOL_KLEIN_PARITY_DIR")
	if dir == "" {
		dir = tb.TempDir()
	}
	parts := map[string]string{}
	for _, flag := range synth.Flux2Parts {
		parts[flag] = filepath.Join(dir, name+"-"+flag+".gguf")
		if _, err := os.Stat(parts[flag]); err != nil {
			var err error
			if parts, err = c.WriteParts(dir, name, "gguf"); err != nil {
				tb.Fatal(err)
			}
			break
		}
	}
	return parts
}

// kleinSDCLI returns sd-cli's path and the parity model c with Qwen's real
// tokenizer embedded in its LLM file, numbered as sd-cli numbers it
// (inferutil.SDCLIQwen), skipping without either (and outside the long tests).
func kleinSDCLI(tb testing.TB, c synth.Flux2) (string, synth.Flux2) {
	tb.Helper()
	bin, v := inferutil.SDCLIQwen(tb, "Flux.2 klein parity against sd-cli", func(dir string) []string {
		tiny := filepath.Join(dir, "tiny-klein.gguf")
		if err := synth.TinyKlein.WriteSingle(tiny); err != nil {
			tb.Fatal(err)
		}
		return []string{"-m", tiny}
	})
	c.LLM.Tokenizer = v
	// sd-cli pads with id 151643 (Qwen's <|endoftext|>) whatever its
	// vocabulary numbers it, which in this build is <|im_start|>'s id: the
	// control tokens share one embedding row, so the padding is the same
	// on both sides while every word keeps its own row.
	c.LLM.SameRowsFrom = 256 + len(c.LLM.Tokenizer.Merges)
	return bin, c
}

// kleinParity renders r on both sides and returns the PSNR of sdtool's image against sd-cli's.
func kleinParity(t *testing.T, bin string, r kleinParityRun) float64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sdcli.png")
	if log, err := exec.Command(bin, r.sdcliArgs(out)...).CombinedOutput(); err != nil {
		t.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
	}
	m, err := infer.Load(infer.Components{"diffusion-model": r.Parts["diffusion-model"], "llm": r.Parts["llm"], "vae": r.Parts["vae"]},
		infer.LoadOptions{Threads: r.Threads})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(r.request(t))
	if err != nil {
		t.Fatal(err)
	}
	img, err := infer.ImageFromCHW(res.Pixels, res.Width, res.Height)
	if err != nil {
		t.Fatal(err)
	}
	psnr := inferutil.ComparePNG(t, out, img, "SDTOOL_KLEIN_PARITY_DIR", "")
	t.Logf("sdtool vs sd-cli, Flux.2 klein, prompt %q, init %q, refs %q, %dx%d, %d euler steps: PSNR %.2f dB", r.Prompt, r.Init, r.Refs, r.Size, r.Size, r.Steps, psnr)
	return psnr
}

// TestKleinMatchesSDCLI renders synth.KleinParity on both sides with a
// real prompt through Qwen's tokenizer: at least 50 dB.
func TestKleinMatchesSDCLI(t *testing.T) {
	bin, c := kleinSDCLI(t, synth.KleinParity)
	parts := kleinParityModel(t, c, "klein-parity")
	psnr := kleinParity(t, bin, kleinParityRun{Parts: parts, Prompt: "a lovely cat", Size: 128, Steps: 2, Seed: 42, Threads: 2})
	if psnr < 50 {
		t.Errorf("PSNR %.2f dB, want at least 50", psnr)
	}
}

// TestKlein9BMatchesSDCLI renders synth.Klein9BParity (klein 9B's DiT and
// Qwen3-8B at full width, one block and two layers) on both sides: at
// least 50 dB.
func TestKlein9BMatchesSDCLI(t *testing.T) {
	bin, c := kleinSDCLI(t, synth.Klein9BParity)
	parts := kleinParityModel(t, c, "klein9b-parity")
	psnr := kleinParity(t, bin, kleinParityRun{Parts: parts, Prompt: "a lovely cat", Size: 128, Steps: 2, Seed: 42, Threads: 2})
	if psnr < 50 {
		t.Errorf("PSNR %.2f dB, want at least 50", psnr)
	}
}

// TestKleinImg2ImgMatchesSDCLI runs img2img from a gradient through the
// flux2 VAE's encoder on both sides: at least 50 dB. 10 steps at
// strength 0.2 run the last three from sigma 0.74, so the init latent
// weighs about a quarter of the start. At 2 steps and strength 0.6 (the
// first version) sd.cpp's rule keeps the whole schedule, which starts at
// sigma 1: the encoder ran but its latent was multiplied by 0, and the
// test could not see a wrong encoder or strength.
func TestKleinImg2ImgMatchesSDCLI(t *testing.T) {
	const steps, strength = 10, 0.2
	sig := infer.Img2ImgSigmas(Flux2Sigmas(steps, 8*8), strength)
	if len(sig) != 4 || sig[0] > 0.8 {
		t.Fatalf("img2img sigmas %v: want three steps from below sigma 0.8, so that the init image counts", sig)
	}
	bin, c := kleinSDCLI(t, synth.KleinParity)
	parts := kleinParityModel(t, c, "klein-parity")
	init := filepath.Join(t.TempDir(), "init.png")
	img := image.NewNRGBA(image.Rect(0, 0, 128, 128))
	for y := 0; y < 128; y++ {
		for x := 0; x < 128; x++ {
			img.Set(x, y, color.NRGBA{uint8(2 * x), uint8(2 * y), uint8(255 - x - y/2), 255})
		}
	}
	if err := inferutil.WritePNGFile(init, img); err != nil {
		t.Fatal(err)
	}
	psnr := kleinParity(t, bin, kleinParityRun{Parts: parts, Init: init, Strength: strength, Prompt: "a lovely cat", Size: 128, Steps: steps, Seed: 42, Threads: 2})
	if psnr < 50 {
		t.Errorf("PSNR %.2f dB, want at least 50", psnr)
	}
}

// TestKleinRefImagesMatchesSDCLI renders with one and with two reference
// images (sd-cli's -r) on both sides: at least 50 dB each. The references
// are not the render's shape (96x64 and 48x112 for 128x128), so both are
// resized by sd-cli's rule (160x112 and 80x192 pixels, in tokens of a
// different grid than the image's) before the VAE encodes them.
func TestKleinRefImagesMatchesSDCLI(t *testing.T) {
	bin, c := kleinSDCLI(t, synth.KleinParity)
	parts := kleinParityModel(t, c, "klein-parity")
	dir := t.TempDir()
	refs := []string{filepath.Join(dir, "ref1.png"), filepath.Join(dir, "ref2.png")}
	for i, size := range [][2]int{{96, 64}, {48, 112}} {
		img := image.NewNRGBA(image.Rect(0, 0, size[0], size[1]))
		for y := range size[1] {
			for x := range size[0] {
				img.Set(x, y, color.NRGBA{uint8(5*x + 40*i), uint8(3 * y), uint8(255 - 2*x - y), 255})
			}
		}
		if err := inferutil.WritePNGFile(refs[i], img); err != nil {
			t.Fatal(err)
		}
	}
	for n := 1; n <= 2; n++ {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			psnr := kleinParity(t, bin, kleinParityRun{Parts: parts, Refs: refs[:n], Prompt: "a lovely cat", Size: 128, Steps: 2, Seed: 42, Threads: 2})
			if psnr < 50 {
				t.Errorf("PSNR %.2f dB, want at least 50", psnr)
			}
		})
	}
}

// kleinChildEnv carries a kleinParityRun to TestKleinGenerateChild.
const kleinChildEnv = "SDTOOL_KLEIN_CHILD"

// TestKleinGenerateChild is BenchmarkKleinVsSDCLI's child process: one
// generation of the run in $SDTOOL_KLEIN_CHILD, printing its seconds per step.
func TestKleinGenerateChild(t *testing.T) {
	spec := os.Getenv(kleinChildEnv)
	if spec == "" {
		t.Skip("runs as BenchmarkKleinVsSDCLI's child process")
	}
	var r kleinParityRun
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		t.Fatal(err)
	}
	comps := infer.Components{"diffusion-model": r.Parts["diffusion-model"], "llm": r.Parts["llm"], "vae": r.Parts["vae"]}
	inferutil.ReportChild(t, comps, infer.LoadOptions{Threads: r.Threads}, r.request(t))
}

// BenchmarkKleinVsSDCLI alternates one sd-cli run and one sdtool run (each
// in a fresh process) of TestKleinMatchesSDCLI's generation on
// synth.KleinParity's files (SDTOOL_KLEIN_PARITY_DIR keeps them; 128x128,
// 2 Euler steps, SDTOOL_BENCH_THREADS threads, default 2) and reports both
// sides' seconds per step and peak RSS and their ratios, measured in one run.
func BenchmarkKleinVsSDCLI(b *testing.B) {
	longtest.Skip(b, "Flux.2 klein against sd-cli")
	bin, c := kleinSDCLI(b, synth.KleinParity)
	r := kleinParityRun{Parts: kleinParityModel(b, c, "klein-parity"), Prompt: "a lovely cat", Size: 128, Steps: 2, Seed: 42, Threads: 2}
	if s := os.Getenv("SDTOOL_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		r.Threads = n
	}
	spec, _ := json.Marshal(r)
	inferutil.BenchVsSDCLI(b, bin, inferutil.SDCLIBench{Args: r.sdcliArgs(filepath.Join(b.TempDir(), "sdcli.png")), Steps: r.Steps,
		Child: "TestKleinGenerateChild", Env: kleinChildEnv, Spec: spec})
}

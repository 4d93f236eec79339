//go:build cgo

package infer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
)

// Z-Image image parity against sd-cli (SDTOOL_SDCLI; skipped without it)
// on synth.ZImageParity: the DiT at full width with two layers and a
// refiner of each kind, Qwen3-4B at full width with two layers, written as
// the component files people download or as one file.

// zimageParityRun is one Z-Image generation's settings, pinned on both sides.
type zimageParityRun struct {
	Parts   map[string]string // by flag; "model" for a single file
	Prompt  string
	Size    int
	Steps   int
	Seed    uint64
	Threads int
}

func (r zimageParityRun) sdcliArgs(out string) []string {
	var args []string
	if p, ok := r.Parts["model"]; ok {
		args = append(args, "-m", p)
	}
	for _, flag := range synth.ZImageParts {
		if p, ok := r.Parts[flag]; ok {
			args = append(args, "--"+flag, p)
		}
	}
	return append(args, "-p", r.Prompt, "-W", strconv.Itoa(r.Size), "-H", strconv.Itoa(r.Size),
		"--steps", strconv.Itoa(r.Steps), "-s", strconv.FormatUint(r.Seed, 10), "--sampling-method", "euler",
		"--scheduler", "discrete", "--cfg-scale", "1", "--rng", "cuda", "-t", strconv.Itoa(r.Threads), "-b", "1", "-o", out, "-v")
}

func (r zimageParityRun) components() Components {
	c := Components{}
	for flag, p := range r.Parts {
		c[flag] = p
	}
	return c
}

func (r zimageParityRun) request() Request {
	return Request{Prompt: r.Prompt, Width: r.Size, Height: r.Size, Steps: r.Steps, CFGScale: 1,
		Seed: r.Seed, RNG: RNGCUDA, Method: Euler, Scheduler: SchedulerDiscrete}
}

// zimageParityModel writes c as component files (or, with single, one
// GGUF file) into a temporary folder, or takes the folder in
// SDTOOL_ZIMAGE_PARITY_DIR (written there once and reused).
func zimageParityModel(tb testing.TB, c synth.ZImage, name string, single bool) map[string]string {
	tb.Helper()
	dir := os.Getenv("SDTOOL_ZIMAGE_PARITY_DIR")
	if dir == "" {
		dir = tb.TempDir()
	}
	if single {
		path := filepath.Join(dir, name+".gguf")
		if _, err := os.Stat(path); err != nil {
			if err := c.WriteSingle(path); err != nil {
				tb.Fatal(err)
			}
		}
		return map[string]string{"model": path}
	}
	parts := map[string]string{}
	for _, flag := range synth.ZImageParts {
		parts[flag] = filepath.Join(dir, name+"-"+flag+".gguf")
		if _, err := os.Stat(parts[flag]); err != nil {
			if parts, err = c.WriteParts(dir, name, "gguf"); err != nil {
				tb.Fatal(err)
			}
			break
		}
	}
	return parts
}

// zimageSDCLI returns sd-cli's path, skipping without it (and outside the long tests).
func zimageSDCLI(tb testing.TB) string {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		longtest.Skip(t, "Z-Image parity against sd-cli")
	}
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		tb.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	return bin
}

// zimageParity renders r on both sides and returns the PSNR of sdtool's image against sd-cli's.
func zimageParity(t *testing.T, bin string, r zimageParityRun) float64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sdcli.png")
	if log, err := exec.Command(bin, r.sdcliArgs(out)...).CombinedOutput(); err != nil {
		t.Fatalf("sd-cli: %v\n%s", err, tail(log))
	}
	ref := readPNGFile(t, out)
	m, err := Load(r.components(), LoadOptions{Threads: r.Threads})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(r.request())
	if err != nil {
		t.Fatal(err)
	}
	img, err := ImageFromCHW(res.Pixels, res.Width, res.Height)
	if err != nil {
		t.Fatal(err)
	}
	if d := os.Getenv("SDTOOL_ZIMAGE_PARITY_DIR"); d != "" {
		copyFile(t, out, filepath.Join(d, "sdcli.png"))
		if err := writePNGFile(filepath.Join(d, "sdtool.png"), img); err != nil {
			t.Fatal(err)
		}
	}
	psnr, err := metrics.PSNR(ref, img)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sdtool vs sd-cli, Z-Image, prompt %q, %dx%d, %d euler steps: PSNR %.2f dB", r.Prompt, r.Size, r.Size, r.Steps, psnr)
	return psnr
}

// TestZImageDiTMatchesSDCLI renders with a text encoder whose token
// embedding is zero, so both sides condition on zero hidden states and the
// image tests the DiT, the schedule and the VAE alone.
func TestZImageDiTMatchesSDCLI(t *testing.T) {
	bin := zimageSDCLI(t)
	zimageStub(t)
	c := synth.ZImageParity
	c.ZeroEmbed = true
	r := zimageParityRun{Parts: zimageParityModel(t, c, "zimage-zero", false), Size: 128, Steps: 4, Seed: 42, Threads: 2}
	if psnr := zimageParity(t, bin, r); psnr < 50 {
		t.Errorf("PSNR %.2f dB against sd-cli, want at least 50", psnr)
	}
}

// zimageStubLLM stands in for the decoder-only encoder kind until it is
// registered: an encoder that conditions on zeros (what a zero token
// embedding gives) over the 8 tokens of the empty prompt's template.
type zimageStubLLM struct{ w int }

func (s zimageStubLLM) Input() string { return "llm" }
func (s zimageStubLLM) Width() int    { return s.w }

type zimageStubCond struct{ w int }

func (s zimageStubCond) encode(string, int, int, bool) (*Conditioning, error) {
	return &Conditioning{Context: make([]float32, 8*s.w), Tokens: 8, Dim: s.w}, nil
}

func zimageStub(t *testing.T) {
	if _, ok := encoderKinds["llm"]; ok {
		return
	}
	encoderKinds["llm"] = encoderKind{detect: func(s shapes, _ formats.Metadata, e *TextEncoder) (EncoderConfig, error) {
		w, err := s.dim(e.Prefix+"model.embed_tokens.weight", 1)
		return zimageStubLLM{w}, err
	}}
	conditioners["zimage"] = func(m *Model) (conditioner, error) { return zimageStubCond{m.Config.Encoders[0].Width()}, nil }
	t.Cleanup(func() { delete(encoderKinds, "llm"); delete(conditioners, "zimage") })
}

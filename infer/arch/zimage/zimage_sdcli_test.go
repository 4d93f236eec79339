//go:build cgo

package zimage

import (
	"encoding/json"
	"fmt"
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

// Z-Image image parity against sd-cli (SDTOOL_SDCLI and SDTOOL_QWEN_TOKENIZER;
// skipped without them) on synth.ZImageParity (narrow where sd.cpp reads
// the widths; SDTOOL_ZIMAGE_FULL=1 takes synth.ZImageFull, the DiT and
// Qwen3-4B at full width), written as the component files people download
// or as one file.

// zimageParityRun is one Z-Image generation's settings, pinned on both sides.
type zimageParityRun struct {
	Parts   map[string]string // by flag; "model" for a single file
	Init    string            // an init PNG for img2img, "" for txt2img
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
	if r.Init != "" {
		args = append(args, "-i", r.Init, "--strength", "0.6")
	}
	return append(args, "-p", r.Prompt, "-W", strconv.Itoa(r.Size), "-H", strconv.Itoa(r.Size),
		"--steps", strconv.Itoa(r.Steps), "-s", strconv.FormatUint(r.Seed, 10), "--sampling-method", "euler",
		"--scheduler", "discrete", "--cfg-scale", "1", "--rng", "cuda", "-t", strconv.Itoa(r.Threads), "-b", "1", "-o", out, "-v")
}

func (r zimageParityRun) components() infer.Components {
	c := infer.Components{}
	for flag, p := range r.Parts {
		c[flag] = p
	}
	return c
}

func (r zimageParityRun) request(tb testing.TB) infer.Request {
	req := infer.Request{Prompt: r.Prompt, Width: r.Size, Height: r.Size, Steps: r.Steps, CFGScale: 1,
		Seed: r.Seed, RNG: infer.RNGCUDA, Method: infer.Euler, Scheduler: infer.SchedulerDiscrete}
	if r.Init != "" {
		req.Init, _, _ = infer.CHWFromImage(inferutil.ReadPNGFile(tb, r.Init))
		req.Strength = 0.6
	}
	return req
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

// zimageParityModelFor returns synth.ZImageParity, its files' name and the
// image size (64: the VAE, whose encoder sd.cpp fixes at full width, is
// most of the time), or ZImageFull at 128x128 with SDTOOL_ZIMAGE_FULL set.
func zimageParityModelFor() (synth.ZImage, string, int) {
	if os.Getenv("SDTOOL_ZIMAGE_FULL") != "" {
		return synth.ZImageFull, "zimage-full", 128
	}
	return synth.ZImageParity, "zimage-parity", 64
}

// zimageSDCLI returns sd-cli's path and the parity model c with Qwen's real
// tokenizer embedded in its LLM file, numbered as sd-cli numbers it
// (inferutil.SDCLIQwen), skipping without either (and outside the long tests).
func zimageSDCLI(tb testing.TB, c synth.ZImage) (string, synth.ZImage) {
	tb.Helper()
	bin, v := inferutil.SDCLIQwen(tb, "Z-Image parity against sd-cli", func(string) []string {
		td := filepath.Join("..", "..", "..", "testdata", "tiny-z-image-")
		return []string{"--diffusion-model", td + "diffusion-model.gguf", "--llm", td + "llm.gguf", "--vae", td + "vae.gguf"}
	})
	c.LLM.Tokenizer = v
	return bin, c
}

// loadOptions are generate's for r: the VAE's encoder is left out of
// memory unless img2img needs it, so that the benchmark's peak RSS is the
// one generate reaches (its child adds inferutil.AsGenerate).
func (r zimageParityRun) loadOptions() infer.LoadOptions {
	return infer.LoadOptions{Threads: r.Threads, VAEDecodeOnly: r.Init == ""}
}

// zimageParity renders r on both sides and returns the PSNR of sdtool's image against sd-cli's.
func zimageParity(t *testing.T, bin string, r zimageParityRun) float64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sdcli.png")
	if log, err := exec.Command(bin, r.sdcliArgs(out)...).CombinedOutput(); err != nil {
		t.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
	}
	ref := inferutil.ReadPNGFile(t, out)
	m, err := infer.Load(r.components(), r.loadOptions())
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
	if d := os.Getenv("SDTOOL_ZIMAGE_PARITY_DIR"); d != "" {
		inferutil.CopyFile(t, out, filepath.Join(d, "sdcli.png"))
		if err := inferutil.WritePNGFile(filepath.Join(d, "sdtool.png"), img); err != nil {
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

// TestZImageMatchesSDCLI renders prompts (English and Chinese) from the
// component files and from one file with ComfyUI's prefixes.
func TestZImageMatchesSDCLI(t *testing.T) {
	c, name, size := zimageParityModelFor()
	bin, c := zimageSDCLI(t, c)
	for _, tc := range []struct {
		name   string
		single bool
		prompt string
	}{
		{"parts/english", false, zimagePrompts[0]},
		{"parts/chinese", false, zimagePrompts[1]},
		{"single/chinese", true, zimagePrompts[1]},
		{"parts/img2img", false, zimagePrompts[0]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := name
			if tc.single {
				file += "-single"
			}
			r := zimageParityRun{Parts: zimageParityModel(t, c, file, tc.single), Prompt: tc.prompt, Size: size, Steps: 4, Seed: 42, Threads: 2}
			if strings.HasSuffix(tc.name, "img2img") {
				r.Init = inferutil.InitPNG(t, r.Size)
			}
			if psnr := zimageParity(t, bin, r); psnr < 50 {
				t.Errorf("PSNR %.2f dB against sd-cli, want at least 50", psnr)
			}
		})
	}
}

// TestZImageDiTMatchesSDCLI renders with a text encoder whose token
// embedding is zero, so both sides condition on zero hidden states and the
// image tests the DiT, the schedule and the VAE alone.
func TestZImageDiTMatchesSDCLI(t *testing.T) {
	c, name, size := zimageParityModelFor()
	bin, c := zimageSDCLI(t, c)
	c.ZeroEmbed = true
	r := zimageParityRun{Parts: zimageParityModel(t, c, name+"-zero", false), Size: size, Steps: 4, Seed: 42, Threads: 2}
	if psnr := zimageParity(t, bin, r); psnr < 50 {
		t.Errorf("PSNR %.2f dB against sd-cli, want at least 50", psnr)
	}
}

// zimageChildEnv carries a zimageParityRun to TestZImageGenerateChild.
const zimageChildEnv = "SDTOOL_ZIMAGE_CHILD"

// TestZImageGenerateChild is BenchmarkZImageVsSDCLI's child process: one
// generation of the run in $SDTOOL_ZIMAGE_CHILD, printing its seconds per
// step, so that the parent reads the child's peak memory alone.
func TestZImageGenerateChild(t *testing.T) {
	spec := os.Getenv(zimageChildEnv)
	if spec == "" {
		t.Skip("runs as BenchmarkZImageVsSDCLI's child process")
	}
	var r zimageParityRun
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		t.Fatal(err)
	}
	m, err := infer.Load(r.components(), inferutil.AsGenerate(r.loadOptions()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(r.request(t))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(inferutil.ChildReport{PerStep: res.Timings.Sampling.Seconds() / float64(res.Timings.Steps)})
	fmt.Printf("CHILD %s\n", b)
}

// BenchmarkZImageVsSDCLI alternates one sd-cli run and one sdtool run (each
// in a fresh process) of the same Z-Image generation on synth.ZImageFull's
// component files (SDTOOL_ZIMAGE_PARITY_DIR keeps them between runs;
// 128x128, 4 Euler steps, a Chinese prompt, SDTOOL_BENCH_THREADS threads,
// default 2) and reports both sides' seconds per step and peak RSS and
// their ratios, measured in one run.
func BenchmarkZImageVsSDCLI(b *testing.B) {
	bin, c := zimageSDCLI(b, synth.ZImageFull)
	r := zimageParityRun{Parts: zimageParityModel(b, c, "zimage-full", false),
		Prompt: zimagePrompts[1], Size: 128, Steps: 4, Seed: 42, Threads: 2}
	if s := os.Getenv("SDTOOL_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		r.Threads = n
	}
	spec, _ := json.Marshal(r)
	inferutil.BenchVsSDCLI(b, bin, inferutil.SDCLIBench{Args: r.sdcliArgs(filepath.Join(b.TempDir(), "sdcli.png")), Steps: r.Steps, Child: "TestZImageGenerateChild", Env: zimageChildEnv, Spec: spec})
}

// zimagePrompts are the parity prompts: English, and Chinese (which both
// tokenizers split into multi-byte pieces).
var zimagePrompts = []string{
	"a red fox in the snow, photographed at dawn",
	"一只在雪地里的红狐狸，黎明时拍摄",
}

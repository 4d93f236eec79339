package main

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/internal/synth"
)

// Validation fidelity (issue 18): for every type that quantize writes and
// sd-cli runs, the PSNR that `generate --compare` reports against the f16
// source is within 0.5 dB of the PSNR between sd-cli's renderings of the
// quantized file and of the source, on a full-size synthetic SD 1.5 (or
// SDTOOL_SD15_MODEL, a full-vocabulary SD 1.5 checkpoint sd-cli accepts).
// They need SDTOOL_SDCLI and take many minutes on two cores:
//
//	SDTOOL_SDCLI=/path/sd-cli go test ./cmd/sdtool -run 'SDCLI' -v -timeout 3h
//
// SDTOOL_PARITY_SIZE (default 64) and SDTOOL_PARITY_STEPS (default 2) set
// the image size and Euler steps; SDTOOL_LORA_KEEP=DIR keeps the files (and
// reuses sd-cli's f16 image there); SDTOOL_FIDELITY_TYPES=a,b runs only those rows and
// SDTOOL_FIDELITY_SEEDS=a,b averages over those seeds.

// parityMerges is CLIP's BPE vocabulary (shared/data beside the checkout), which the
// synthetic model's tokenizer lacks and sd-cli builds in.
var parityMerges = sharedData("clip_bpe_merges.txt")

// sharedData finds name in the shared/data folder of SDTOOL_SHARED_DATA's folder, or of the nearest
// folder above the working directory that has one, so the tests find it from the main checkout and from
// a worktree nested deeper alike; when there is none it returns a path that does not exist, and the
// tests that need it skip.
func sharedData(name string) string {
	if d := os.Getenv("SDTOOL_SHARED_DATA"); d != "" {
		return filepath.Join(d, name)
	}
	dir, err := os.Getwd()
	for err == nil {
		p := filepath.Join(dir, "shared", "data", name)
		if _, serr := os.Stat(p); serr == nil {
			return p
		}
		up := filepath.Dir(dir)
		if up == dir {
			break
		}
		dir = up
	}
	return filepath.Join("shared", "data", name)
}

// fidelityTol is the agreement item 3 asks for.
const fidelityTol = 0.5

// paritySettings are the pinned generation settings, for both programs.
type paritySettings struct {
	prompt, negative string
	w, h, steps      int
	seed             int
	method           string
	cfg              float64
	init             string
	strength         float64
	// prediction, when set, overrides the prediction type in both programs (--prediction).
	prediction string
}

func defaultParity() paritySettings {
	n := func(env string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
			return v
		}
		return def
	}
	size := n("SDTOOL_PARITY_SIZE", 64)
	return paritySettings{prompt: "a photo of a cat", w: size, h: size, steps: n("SDTOOL_PARITY_STEPS", 2), seed: 42,
		method: "euler", cfg: 7}
}

func (p paritySettings) common() []string {
	a := []string{"-p", p.prompt, "-W", strconv.Itoa(p.w), "-H", strconv.Itoa(p.h), "--steps", strconv.Itoa(p.steps),
		"-s", strconv.Itoa(p.seed), "--sampling-method", p.method, "--cfg-scale", strconv.FormatFloat(p.cfg, 'g', -1, 64),
		"--scheduler", "discrete", "--rng", "cuda", "-t", "2"}
	if p.negative != "" {
		a = append(a, "-n", p.negative)
	}
	if p.init != "" {
		a = append(a, "-i", p.init, "--strength", strconv.FormatFloat(p.strength, 'g', -1, 64))
	}
	if p.prediction != "" {
		a = append(a, "--prediction", p.prediction)
	}
	return a
}

// parityModel returns SDTOOL_SD15_MODEL or writes the synthetic full-size SD 1.5 into dir.
func parityModel(t *testing.T, dir string) string {
	t.Helper()
	if p := os.Getenv("SDTOOL_SD15_MODEL"); p != "" {
		return p
	}
	path := filepath.Join(dir, "sd15.safetensors")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if err := synth.Write(path, synth.Spec{Arch: "sd1", Seed: 1, DType: formats.F16}); err != nil {
		t.Fatal(err)
	}
	return path
}

// sdcliRender runs sd-cli on model with p and returns its image and log.
func sdcliRender(t *testing.T, bin, model string, p paritySettings, out string) string {
	t.Helper()
	args := append([]string{"-m", model, "-o", out, "-b", "1", "--clip-skip", "-1", "-v"}, p.common()...)
	log, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		s := string(log)
		if len(s) > 3000 {
			s = s[len(s)-3000:]
		}
		t.Fatalf("sd-cli %v: %v\n%s", args, err, s)
	}
	return string(log)
}

var comparePSNR = regexp.MustCompile(`image PSNR ([-+0-9.Inf]+) dB`)

// sdtoolCompare runs generate --compare and returns the PSNR it reports.
func sdtoolCompare(t *testing.T, model, ref string, p paritySettings, out string, extra ...string) float64 {
	t.Helper()
	args := append([]string{"generate", "-m", model, "--compare", ref, "-o", out, "--force", "--tokenizer", parityMerges}, p.common()...)
	code, stdout, stderr := runApp(t, append(args, extra...)...)
	m := comparePSNR.FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("generate %v: exit %d\n%s\n%s", args, code, stdout, stderr)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func imagePSNR(t *testing.T, a, b string) float64 {
	t.Helper()
	ia, err := readPNG(a)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := readPNG(b)
	if err != nil {
		t.Fatal(err)
	}
	v, err := metrics.PSNR(ia, ib)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCompareFidelitySDCLI is item 3's table. Where both programs
// quantize activations (q8_0's blocks, INT8 rows), their float rounding
// differences flip codes, and the two renderings of one file lie about as
// far apart (38-42 dB at 64x64) as each lies from its f16 image: one seed's
// PSNR is a noisy draw (int8 at seed 42: +1.8 dB, at 43: -0.05 dB).
// SDTOOL_FIDELITY_SEEDS=42,43,... (default 42) averages the figures over
// seeds, and the mean difference must be within the tolerance.
func TestCompareFidelitySDCLI(t *testing.T) {
	bin, _ := sdcliEnv(t)
	if _, err := os.Stat(parityMerges); err != nil {
		t.Skipf("no CLIP vocabulary at %s", parityMerges)
	}
	dir := workDir(t, "fidelity")
	model := parityModel(t, dir)
	p := defaultParity()
	seeds := []int{p.seed}
	if v := os.Getenv("SDTOOL_FIDELITY_SEEDS"); v != "" {
		seeds = seeds[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("SDTOOL_FIDELITY_SEEDS=%q: %v", v, err)
			}
			seeds = append(seeds, n)
		}
	}
	seeded := func(name string, seed int) string {
		if seed == defaultParity().seed {
			return filepath.Join(dir, name+".png") // the single-seed runs' names
		}
		return filepath.Join(dir, name+"-"+strconv.Itoa(seed)+".png")
	}
	for _, seed := range seeds {
		p.seed = seed
		ref := seeded("sdcli-f16", seed)
		if _, err := os.Stat(ref); err != nil || os.Getenv("SDTOOL_LORA_KEEP") == "" {
			sdcliRender(t, bin, model, p, ref)
		}
	}
	t.Logf("%dx%d, %d %s steps, seeds %v, CFG %g, prompt %q", p.w, p.h, p.steps, p.method, seeds, p.cfg, p.prompt)
	t.Logf("| type | seed | generate --compare | sd-cli | difference |")
	types := []string{"q8_0", "q6_K", "Q5_K_M", "Q4_K_M", "q4_0", "Q3_K_M", "Q2_K", "int8_convrot", "int8", "fp8_e4m3"}
	if v := os.Getenv("SDTOOL_FIDELITY_TYPES"); v != "" {
		types = strings.Split(v, ",")
	}
	for _, typ := range types {
		t.Run(typ, func(t *testing.T) {
			ext := ".gguf"
			if typ == "int8_convrot" || typ == "int8" || typ == "fp8_e4m3" {
				ext = ".safetensors"
			}
			q := filepath.Join(dir, "sd15-"+typ+ext)
			args := []string{"quantize", model, "--type", typ, "-o", q, "--force"}
			if ext == ".safetensors" {
				// sd-cli reads embeddings with get_rows, which has no INT8
				// or FP8 module path: a published file keeps them float.
				args = append(args, "--tensor-type", "embedding=keep")
			}
			if code, _, stderr := runApp(t, args...); code != 0 {
				t.Fatalf("quantize %s: %s", typ, stderr)
			}
			var oursSum, cliSum float64
			for _, seed := range seeds {
				p.seed = seed
				img := seeded("sdcli-"+typ, seed)
				sdcliRender(t, bin, q, p, img)
				cli := imagePSNR(t, seeded("sdcli-f16", seed), img)
				ours := sdtoolCompare(t, q, model, p, seeded("sdtool-"+typ, seed))
				t.Logf("| %s | %d | %.2f dB | %.2f dB | %+.2f dB |", typ, seed, ours, cli, ours-cli)
				oursSum, cliSum = oursSum+ours, cliSum+cli
			}
			n := float64(len(seeds))
			ours, cli := oursSum/n, cliSum/n
			if len(seeds) > 1 {
				t.Logf("| %s | mean | %.2f dB | %.2f dB | %+.2f dB |", typ, ours, cli, ours-cli)
			}
			if math.Abs(ours-cli) > fidelityTol && !(math.IsInf(ours, 1) && math.IsInf(cli, 1)) {
				t.Errorf("%s: generate --compare reports %.2f dB, sd-cli renders %.2f dB (tolerance %.1f)", typ, ours, cli, fidelityTol)
			}
			if os.Getenv("SDTOOL_LORA_KEEP") == "" {
				os.Remove(q)
			}
		})
	}
}

// sdtoolVsSDCLI renders p with both programs from model and returns the
// PSNR between the two images.
func sdtoolVsSDCLI(t *testing.T, bin, model, dir, name string, p paritySettings, extra ...string) (float64, string) {
	t.Helper()
	cliImg := filepath.Join(dir, "sdcli-"+name+".png")
	log := sdcliRender(t, bin, model, p, cliImg)
	ours := filepath.Join(dir, "sdtool-"+name+".png")
	args := append([]string{"generate", "-m", model, "-o", ours, "--force", "--tokenizer", parityMerges}, p.common()...)
	if code, stdout, stderr := runApp(t, append(args, extra...)...); code != 0 {
		t.Fatalf("generate %v: exit %d\n%s\n%s", args, code, stdout, stderr)
	}
	return imagePSNR(t, cliImg, ours), log
}

// TestParityRowsSDCLI covers items 5-7: prompt weights with a number,
// img2img and a size that is not a multiple of 64, each at 50 dB or more
// against sd-cli.
func TestParityRowsSDCLI(t *testing.T) {
	bin, _ := sdcliEnv(t)
	if _, err := os.Stat(parityMerges); err != nil {
		t.Skipf("no CLIP vocabulary at %s", parityMerges)
	}
	dir := workDir(t, "parity")
	model := parityModel(t, dir)
	base := defaultParity()
	size := base.w
	weights := base
	weights.prompt, weights.seed, weights.cfg = "a (red:1.3) house", 11, 6
	mixed := weights
	mixed.prompt = "a (red:1.3) house, [blurry]"
	init := filepath.Join(dir, "init.png")
	sdcliRender(t, bin, model, base, init)
	img2img := base
	img2img.init, img2img.strength, img2img.seed = init, 0.6, 7
	img2imgA := img2img
	img2imgA.method = "euler_a"
	odd := base
	odd.w, odd.h = size*2, size*3/2 // 128x96 at the default size: sd-cli aligns it up
	for _, c := range []struct {
		name string
		p    paritySettings
	}{{"weight", weights}, {"weight-mixed", mixed}, {"img2img-euler", img2img}, {"img2img-euler_a", img2imgA}, {"align", odd}} {
		t.Run(c.name, func(t *testing.T) {
			psnr, _ := sdtoolVsSDCLI(t, bin, model, dir, c.name, c.p)
			t.Logf("%s: sdtool vs sd-cli %.2f dB", c.name, psnr)
			if psnr < 50 {
				t.Errorf("%s: %.2f dB against sd-cli, want at least 50", c.name, psnr)
			}
		})
	}
}

//go:build cgo

package infer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/internal/synth"
)

// Prompt parity per DiT family against sd-cli (issue 36, item 4; the CLIP families' run in cmd/sdtool's
// TestFamilyParitySDCLI): a weighted prompt, a weighted negative prompt under classifier-free guidance and
// img2img, each at 50 dB or more, on each family's own parity model and sd-cli arguments (its harness in
// <family>_sdcli_test.go). sd-cli takes the last of a repeated flag, so a case appends its flags to the
// harness's. Where sd-cli's build stubs an encoder's vocabulary (T5 for Flux and Chroma), the prompts are
// attention syntax around spaces, which both sides parse to weighted segments and tokenize to nothing; Z-Image,
// Flux.2 klein and Qwen-Image (Qwen's real BPE) and SD3 (CLIP-L and bigG, no T5 in its parity files) take
// real words. Wan is left out: its parity files have no text encoder (UMT5's vocabulary is a stub in sd-cli)
// and its image-to-video is another mode.
//
//	SDTOOL_LONG=1 SDTOOL_SDCLI=... SDTOOL_QWEN_TOKENIZER=... go test ./infer -run FamilyPromptsMatchSDCLI -v -timeout 2h

// promptParity is one family's base run: sd-cli's arguments, sdtool's components, load options and request,
// and the prompts and guidance scale of the cases.
type promptParity struct {
	bin      string
	args     func(out string) []string
	comps    Components
	opt      LoadOptions
	req      Request
	weighted string
	negative string
	cfg      float32 // the negative case's guidance scale
}

// promptParityCase is one case: sd-cli's extra flags and the request sdtool renders.
type promptParityCase struct {
	name  string
	extra []string
	req   Request
}

// cases returns the weighted, negative, guided and img2img cases of p; init is img2img's init PNG.
func (p promptParity) cases(t *testing.T, init string) []promptParityCase {
	weighted := p.req
	weighted.Prompt = p.weighted
	negative := p.req
	negative.Negative, negative.CFGScale = p.negative, p.cfg
	guided := p.req
	guided.CFGScale = p.cfg
	img2img := weighted
	img2img.Init, _, _ = CHWFromImage(readPNGFile(t, init))
	img2img.Strength = 0.6
	cfg := strconv.FormatFloat(float64(p.cfg), 'g', -1, 32)
	return []promptParityCase{
		{"weighted", []string{"-p", p.weighted}, weighted},
		{"negative", []string{"-n", p.negative, "--cfg-scale", cfg}, negative},
		// The same guidance with an empty negative prompt: a failure of "negative" that this case shares is
		// in the family's guidance, not in the negative prompt's weights.
		{"guided", []string{"--cfg-scale", cfg}, guided},
		{"img2img", []string{"-p", p.weighted, "-i", init, "--strength", "0.6"}, img2img},
	}
}

// run renders every case of p on both sides, loading sdtool's model once.
func (p promptParity) run(t *testing.T, size int) {
	m, err := Load(p.comps, p.opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range p.cases(t, zimageInitPNG(t, size)) {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "sdcli.png")
			if log, err := exec.Command(p.bin, append(p.args(out), c.extra...)...).CombinedOutput(); err != nil {
				t.Fatalf("sd-cli: %v\n%s", err, tail(log))
			}
			res, err := m.Generate(c.req)
			if err != nil {
				t.Fatal(err)
			}
			img, err := ImageFromCHW(res.Pixels, res.Width, res.Height)
			if err != nil {
				t.Fatal(err)
			}
			psnr, err := metrics.PSNR(readPNGFile(t, out), img)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: prompt %q, negative %q, cfg %g, init %v: sdtool vs sd-cli %.2f dB", c.name, c.req.Prompt, c.req.Negative, c.req.CFGScale, c.req.Init != nil, psnr)
			if psnr < 50 {
				t.Errorf("%s: %.2f dB against sd-cli, want at least 50", c.name, psnr)
			}
		})
	}
}

// Prompts with real words, for families whose sd-cli vocabularies are real, and syntax around spaces for
// those whose T5 is a stub there.
const (
	weightedWords  = "a red fox in the (snow:1.3), [photographed] at ((dawn))"
	negativeWords  = "(blurry:1.2), [ugly], ((bad hands))"
	weightedSpaces = "( :1.3) [ ] (( ))"
	negativeSpaces = "[ ] ( :1.4)"
)

// TestFamilyPromptsMatchSDCLI runs the three cases for every DiT family that has an sd-cli harness.
func TestFamilyPromptsMatchSDCLI(t *testing.T) {
	t.Run("zimage", func(t *testing.T) {
		c, name, size := zimageParityModelFor()
		bin, c := zimageSDCLI(t, c)
		r := zimageParityRun{Parts: zimageParityModel(t, c, name, false), Prompt: zimagePrompts[0], Size: size, Steps: 2, Seed: 42, Threads: 2}
		promptParity{bin: bin, args: r.sdcliArgs, comps: r.components(), opt: LoadOptions{Threads: r.Threads}, req: r.request(t),
			weighted: weightedWords, negative: negativeWords, cfg: 3}.run(t, size)
	})
	t.Run("klein", func(t *testing.T) {
		bin, c := kleinSDCLI(t, synth.KleinParity)
		r := kleinParityRun{Parts: kleinParityModel(t, c, "klein-parity"), Prompt: "a lovely cat", Size: 64, Steps: 2, Seed: 42, Threads: 2}
		comps := Components{"diffusion-model": r.Parts["diffusion-model"], "llm": r.Parts["llm"], "vae": r.Parts["vae"]}
		promptParity{bin: bin, args: r.sdcliArgs, comps: comps, opt: LoadOptions{Threads: r.Threads}, req: r.request(t),
			weighted: weightedWords, negative: negativeWords, cfg: 3}.run(t, r.Size)
	})
	t.Run("qwen_image", func(t *testing.T) {
		bin, tok := qwenImageParityEnv(t)
		parts, _ := qwenImageParityFiles(t)
		r := qwenImageParityRun{Parts: parts, Prompt: "a red fox", Size: 64, Steps: 2, Seed: 42, CFG: 2.5, Threads: 2, Tokenizer: tok}
		promptParity{bin: bin, args: r.sdcliArgs, comps: r.components(), opt: LoadOptions{Threads: r.Threads, Tokenizers: map[string]string{"llm": tok}},
			req: r.request(), weighted: weightedWords, negative: negativeWords, cfg: 4}.run(t, r.Size)
	})
	t.Run("sd3", func(t *testing.T) {
		bin := chromaSDCLI(t)
		merges := sd3Merges(t)
		r := sd3Run(t, synth.SD3ParityMedium, "sd35-medium-parity")
		r.Size = 64
		promptParity{bin: bin, args: r.sdcliArgs, comps: r.components(), opt: LoadOptions{Threads: r.Threads, Tokenizers: map[string]string{"clip": merges}},
			req: r.request(), weighted: weightedWords, negative: negativeWords, cfg: 6}.run(t, r.Size)
	})
	t.Run("flux", func(t *testing.T) {
		bin := sdcliBinary(t)
		r := fluxParityRun{Parts: fluxParityModel(t, synth.FluxParity, "flux-parity", true), Prompt: " ", Size: 64, Steps: 2, Seed: 42, Guidance: 3.5, Threads: 2}
		promptParity{bin: bin, args: r.sdcliArgs, comps: r.components(), opt: LoadOptions{Threads: r.Threads, Tokenizers: map[string]string{"clip": sharedCLIPMerges}},
			req: r.request(), weighted: weightedSpaces, negative: negativeSpaces, cfg: 2}.run(t, r.Size)
	})
	t.Run("chroma", func(t *testing.T) {
		bin := chromaSDCLI(t)
		r := chromaParityRun(t)
		r.Size = 64
		promptParity{bin: bin, args: r.sdcliArgs, comps: r.components(), opt: LoadOptions{Threads: r.Threads}, req: r.request(),
			weighted: weightedSpaces, negative: negativeSpaces, cfg: r.cfg()}.run(t, r.Size)
	})
}

// findSharedData returns name in the shared/data folder of SDTOOL_SHARED_DATA's folder or of the nearest
// folder above the working directory that has one (the main checkout's parent, or a worktree's further up),
// or the path beside the main checkout when there is none (the tests that need it then skip).
func findSharedData(name string) string {
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
	return filepath.Join("..", "..", "shared", "data", name)
}

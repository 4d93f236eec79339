//go:build cgo

package inferutil

import (
	"image"
	"image/color"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/metrics"
)

// Prompt parity per DiT family against sd-cli (issue 36, item 4; the CLIP families' run in cmd/sdtool's
// TestFamilyParitySDCLI): a weighted prompt, a weighted negative prompt under classifier-free guidance and
// img2img, each at 50 dB or more, on each family's own parity model and sd-cli arguments (its harness in
// <family>_sdcli_test.go, each family's TestFamilyPromptsMatchSDCLI). sd-cli takes the last of a repeated flag, so a case appends its flags to the
// harness's. Where sd-cli's build stubs an encoder's vocabulary (T5 for Flux and Chroma), the prompts are
// attention syntax around spaces, which both sides parse to weighted segments and tokenize to nothing; Z-Image,
// Flux.2 klein and Qwen-Image (Qwen's real BPE) and SD3 (CLIP-L and bigG, no T5 in its parity files) take
// real words; Flux.2 dev's words all become one id on both sides (Mistral's vocabulary is a stub in sd-cli),
// which still compares the weights by position. Wan is left out: its parity files have no text encoder, so
// neither program encodes a prompt and a weighted or negative one would render the plain image again, and
// with a UMT5 every prompt would tokenize to nothing in sd-cli (a stub vocabulary), leaving no token to weigh;
// its init image is TestWanTI2VImageToVideoSDCLIParity's.
//
//	SDTOOL_LONG=1 SDTOOL_SDCLI=... SDTOOL_QWEN_TOKENIZER=... go test ./infer/... -run FamilyPromptsMatchSDCLI -v -timeout 2h

// InitPNG writes a size×size colour gradient as img2img's init image.
func InitPNG(t *testing.T, size int) string {
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	for y := 0; y < size; y++ {
		for x := 0; x < size; x++ {
			img.Set(x, y, color.NRGBA{uint8(2 * x), uint8(2 * y), uint8(255 - x - y), 255})
		}
	}
	path := filepath.Join(t.TempDir(), "init.png")
	if err := WritePNGFile(path, img); err != nil {
		t.Fatal(err)
	}
	return path
}

// PromptParity is one family's base run: sd-cli's arguments, sdtool's components, load options and request,
// and the prompts and guidance scale of the cases.
type PromptParity struct {
	Bin      string
	Args     func(out string) []string
	Comps    infer.Components
	Opt      infer.LoadOptions
	Req      infer.Request
	Weighted string
	Negative string
	CFG      float32 // the negative case's guidance scale
}

// promptParityCase is one case: sd-cli's extra flags and the request sdtool renders.
type promptParityCase struct {
	name  string
	extra []string
	req   infer.Request
}

// cases returns the weighted, negative, guided and img2img cases of p; init is img2img's init PNG.
func (p PromptParity) cases(t *testing.T, init string) []promptParityCase {
	weighted := p.Req
	weighted.Prompt = p.Weighted
	negative := p.Req
	negative.Negative, negative.CFGScale = p.Negative, p.CFG
	guided := p.Req
	guided.CFGScale = p.CFG
	img2img := weighted
	img2img.Init, _, _ = infer.CHWFromImage(ReadPNGFile(t, init))
	// sd-cli keeps the last steps·strength sigmas (one less when that is all of them), so with the
	// harnesses' 2 steps any strength of 0.5 or more starts at the first sigma, where a flow model's
	// start is all noise and the init image changes nothing: 0.4 starts one step from the image.
	img2img.Strength = img2imgStrength
	cfg := strconv.FormatFloat(float64(p.CFG), 'g', -1, 32)
	return []promptParityCase{
		{"weighted", []string{"-p", p.Weighted}, weighted},
		{"negative", []string{"-n", p.Negative, "--cfg-scale", cfg}, negative},
		// The same guidance with an empty negative prompt: a failure of "negative" that this case shares is
		// in the family's guidance, not in the negative prompt's weights.
		{"guided", []string{"--cfg-scale", cfg}, guided},
		{"img2img", []string{"-p", p.Weighted, "-i", init, "--strength", strconv.FormatFloat(img2imgStrength, 'g', -1, 32)}, img2img},
	}
}

// img2imgStrength is the img2img case's strength (PromptParity.cases says why).
const img2imgStrength = 0.4

// Run renders every case of p on both sides, loading sdtool's model once.
func (p PromptParity) Run(t *testing.T, size int) {
	m, err := infer.Load(p.Comps, p.Opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var weighted image.Image // sdtool's weighted image, which img2img's must differ from
	for _, c := range p.cases(t, InitPNG(t, size)) {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "sdcli.png")
			if log, err := exec.Command(p.Bin, append(p.Args(out), c.extra...)...).CombinedOutput(); err != nil {
				t.Fatalf("sd-cli: %v\n%s", err, Tail(log))
			}
			res, err := m.Generate(c.req)
			if err != nil {
				t.Fatal(err)
			}
			img, err := infer.ImageFromCHW(res.Pixels, res.Width, res.Height)
			if err != nil {
				t.Fatal(err)
			}
			psnr, err := metrics.PSNR(ReadPNGFile(t, out), img)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: prompt %q, negative %q, cfg %g, init %v: sdtool vs sd-cli %.2f dB", c.name, c.req.Prompt, c.req.Negative, c.req.CFGScale, c.req.Init != nil, psnr)
			if psnr < 50 {
				t.Errorf("%s: %.2f dB against sd-cli, want at least 50", c.name, psnr)
			}
			switch c.name {
			case "weighted":
				weighted = img
			case "img2img":
				if weighted == nil {
					break // the weighted case did not run (-run)
				}
				if same, err := metrics.PSNR(weighted, img); err == nil && math.IsInf(same, 1) {
					t.Errorf("img2img: the init image changed nothing (the same pixels as the weighted case)")
				}
			}
		})
	}
}

// Prompts with real words, for families whose sd-cli vocabularies are real, and syntax around spaces for
// those whose T5 is a stub there.
const (
	WeightedWords  = "a red fox in the (snow:1.3), [photographed] at ((dawn))"
	NegativeWords  = "(blurry:1.2), [ugly], ((bad hands))"
	WeightedSpaces = "( :1.3) [ ] (( ))"
	NegativeSpaces = "[ ] ( :1.4)"
)

// FindSharedData returns name in the shared/data folder of SDTOOL_SHARED_DATA's folder or of the nearest
// folder above the working directory that has one (the main checkout's parent, or a worktree's further up),
// or the path beside the main checkout when there is none (the tests that need it then skip).
func FindSharedData(name string) string {
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

//go:build cgo

package qwenimage

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/quant/imatrix"
)

// Qwen-Image image parity against sd-cli (SDTOOL_SDCLI, built with Qwen's
// real merges; the same tokenizer.json in SDTOOL_QWEN_TOKENIZER for
// sdtool) on synth.QwenImageParity: the DiT at full width with two
// blocks, Qwen2.5-VL 7B's text model at full width with two layers, Wan
// 2.1's VAE; q8_0 matrices in GGUF files, the VAE in safetensors. Both programs get the same
// files, prompt, seed, sampler, size, steps and guidance scale.

// qwenImageParityRun is one Qwen-Image generation's settings, pinned on both sides.
type qwenImageParityRun struct {
	// Parts are the component files by flag; Single, when set, is one
	// file with ComfyUI's prefixes used instead.
	Parts           map[string]string
	Single          string
	Prompt          string
	Size, Steps     int
	Seed            uint64
	CFG             float32
	Threads         int
	Tokenizer       string
	SDCLIExtraFlags []string
}

func (r qwenImageParityRun) sdcliArgs(out string) []string {
	var args []string
	if r.Single != "" {
		args = append(args, "-m", r.Single)
	}
	for _, flag := range synth.QwenImageParts {
		if p, ok := r.Parts[flag]; ok && r.Single == "" {
			args = append(args, "--"+flag, p)
		}
	}
	args = append(args, "-p", r.Prompt, "-W", strconv.Itoa(r.Size), "-H", strconv.Itoa(r.Size),
		"--steps", strconv.Itoa(r.Steps), "-s", strconv.FormatUint(r.Seed, 10), "--sampling-method", "euler",
		"--scheduler", "discrete", "--cfg-scale", strconv.FormatFloat(float64(r.CFG), 'g', -1, 32),
		"--rng", "cuda", "-t", strconv.Itoa(r.Threads), "-b", "1", "-o", out, "-v")
	return append(args, r.SDCLIExtraFlags...)
}

func (r qwenImageParityRun) components() infer.Components {
	if r.Single != "" {
		return infer.Components{"model": r.Single}
	}
	return infer.Components{"diffusion-model": r.Parts["diffusion-model"], "llm": r.Parts["llm"], "vae": r.Parts["vae"]}
}

func (r qwenImageParityRun) request() infer.Request {
	return infer.Request{Prompt: r.Prompt, Width: r.Size, Height: r.Size, Steps: r.Steps, CFGScale: r.CFG,
		Seed: r.Seed, RNG: infer.RNGCUDA, Method: infer.Euler, Scheduler: infer.SchedulerDiscrete}
}

// loadOptions are generate's for r's text to image: no VAE encoder (which
// would add its weights to the benchmark's peak RSS).
func (r qwenImageParityRun) loadOptions() infer.LoadOptions {
	return infer.LoadOptions{Threads: r.Threads, Tokenizers: map[string]string{"llm": r.Tokenizer}, VAEDecodeOnly: true}
}

func (r qwenImageParityRun) load(tb testing.TB) *infer.Model {
	tb.Helper()
	m, err := infer.Load(r.components(), r.loadOptions())
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// qwenImageParityEnv returns sd-cli and the Qwen tokenizer, or skips.
func qwenImageParityEnv(tb testing.TB) (bin, tok string) {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		longtest.Skip(t, "Qwen-Image parity against sd-cli")
	}
	bin, tok = os.Getenv("SDTOOL_SDCLI"), os.Getenv("SDTOOL_QWEN_TOKENIZER")
	if bin == "" || tok == "" {
		tb.Skip("SDTOOL_SDCLI (sd-cli built with Qwen's merges) and SDTOOL_QWEN_TOKENIZER (the same tokenizer.json) are not both set")
	}
	inferutil.RequireParityBuild(tb)
	return bin, sdcliQwenTokenizer(tb, tok)
}

// sdcliQwenTokenizer writes the tokenizer sd-cli built from tokenizer.json
// path really has: ../shared/tools/build-sdcli joins the merges with
// newlines and no newline after the last, and sd.cpp's line splitter drops
// an unterminated last line, so sd-cli lacks the last merge (and its
// token, 151642) and numbers the added tokens from 151642, one below
// Qwen's (<|im_start|> is 151643 there). Giving sdtool the same vocabulary
// makes both programs see the same ids.
func sdcliQwenTokenizer(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var tj map[string]any
	if err := json.Unmarshal(b, &tj); err != nil {
		tb.Fatal(err)
	}
	model, _ := tj["model"].(map[string]any)
	merges, _ := model["merges"].([]any)
	vocab, _ := model["vocab"].(map[string]any)
	added, _ := tj["added_tokens"].([]any)
	if len(merges) == 0 || len(vocab) != 256+len(merges) {
		tb.Fatalf("%s: %d merges and %d tokens, want 256 more tokens than merges", path, len(merges), len(vocab))
	}
	last := len(vocab) - 1
	for tok, id := range vocab {
		if int(id.(float64)) == last {
			delete(vocab, tok)
		}
	}
	model["merges"] = merges[:len(merges)-1]
	for _, a := range added {
		if m, ok := a.(map[string]any); ok {
			m["id"] = m["id"].(float64) - 1
		}
	}
	out, err := json.Marshal(tj)
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(tb.TempDir(), "sdcli-qwen-tokenizer.json")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}

// qwenImageParityFiles writes QwenImageParity as component GGUF files
// and as one ComfyUI-prefixed GGUF into SDTOOL_QWEN_IMAGE_PARITY_DIR
// (reused when there) or a temporary folder.
func qwenImageParityFiles(tb testing.TB) (parts map[string]string, single string) {
	tb.Helper()
	dir := os.Getenv("SDTOOL_QWEN_IMAGE_PARITY_DIR")
	if dir == "" {
		dir = tb.TempDir()
	}
	c, name := synth.QwenImageParity, "qwen-image-parity"
	parts = map[string]string{}
	have := true
	for _, flag := range synth.QwenImageParts {
		ext := ".gguf"
		if flag == "vae" {
			ext = ".safetensors"
		}
		parts[flag] = filepath.Join(dir, name+"-"+flag+ext)
		if _, err := os.Stat(parts[flag]); err != nil {
			have = false
		}
	}
	if !have {
		var err error
		if parts, err = c.WriteParts(dir, name, "gguf"); err != nil {
			tb.Fatal(err)
		}
	}
	single = filepath.Join(dir, name+".gguf")
	if _, err := os.Stat(single); err != nil {
		if err := c.WriteSingle(single); err != nil {
			tb.Fatal(err)
		}
	}
	return parts, single
}

func TestQwenImageMatchesSDCLI(t *testing.T) {
	bin, tok := qwenImageParityEnv(t)
	parts, single := qwenImageParityFiles(t)
	for _, c := range []struct {
		name, prompt string
		single       bool
	}{
		{"components", "a red fox in the snow, (watercolor:1.2)", false},
		{"single file", "一只橘猫坐在窗台上，阳光明媚", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := qwenImageParityRun{Parts: parts, Prompt: c.prompt, Size: 128, Steps: 4, Seed: 42, CFG: 2.5, Threads: 2, Tokenizer: tok}
			if c.single {
				r.Single = single
			}
			out := filepath.Join(t.TempDir(), "sdcli.png")
			cmd := exec.Command(bin, r.sdcliArgs(out)...)
			if log, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
			}
			ref := inferutil.ReadPNGFile(t, out)
			m := r.load(t)
			defer m.Close()
			res, err := m.Generate(r.request())
			if err != nil {
				t.Fatal(err)
			}
			img, err := infer.ImageFromCHW(res.Pixels, res.Width, res.Height)
			if err != nil {
				t.Fatal(err)
			}
			if d := os.Getenv("SDTOOL_QWEN_IMAGE_PARITY_DIR"); d != "" {
				inferutil.CopyFile(t, out, filepath.Join(d, "sdcli-"+strings.ReplaceAll(c.name, " ", "-")+".png"))
				if err := inferutil.WritePNGFile(filepath.Join(d, "sdtool-"+strings.ReplaceAll(c.name, " ", "-")+".png"), img); err != nil {
					t.Fatal(err)
				}
			}
			psnr, err := metrics.PSNR(ref, img)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("sdtool vs sd-cli, Qwen-Image %s, 128x128, 4 euler steps, cfg 2.5: PSNR %.2f dB", c.name, psnr)
			if psnr < 50 {
				t.Errorf("PSNR %.2f dB against sd-cli, want at least 50", psnr)
			}
		})
	}
}

// qwenImageChildEnv carries a qwenImageParityRun to TestQwenImageGenerateChild.
const qwenImageChildEnv = "SDTOOL_QWEN_IMAGE_CHILD"

// TestQwenImageGenerateChild is BenchmarkQwenImageVsSDCLI's child process:
// one generation of the run in $SDTOOL_QWEN_IMAGE_CHILD, printing its
// seconds per step, so that the parent reads the child's peak memory alone.
func TestQwenImageGenerateChild(t *testing.T) {
	spec := os.Getenv(qwenImageChildEnv)
	if spec == "" {
		t.Skip("runs as BenchmarkQwenImageVsSDCLI's child process")
	}
	var r qwenImageParityRun
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		t.Fatal(err)
	}
	// As generate loads for one image: one part held at a time.
	m, err := infer.Load(r.components(), inferutil.AsGenerate(r.loadOptions()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(r.request())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(inferutil.ChildReport{PerStep: res.Timings.Sampling.Seconds() / float64(res.Timings.Steps)})
	fmt.Printf("CHILD %s\n", b)
}

// BenchmarkQwenImageVsSDCLI alternates one sd-cli run and one sdtool run
// (each in a fresh process) of the same generation on QwenImageParity's
// component files (128x128, 4 Euler steps, cfg 2.5, SDTOOL_BENCH_THREADS
// threads, default 2) and reports both sides' seconds per step and peak
// RSS and their ratios, measured in one run.
func BenchmarkQwenImageVsSDCLI(b *testing.B) {
	bin, tok := qwenImageParityEnv(b)
	parts, _ := qwenImageParityFiles(b)
	r := qwenImageParityRun{Parts: parts, Prompt: "a red fox in the snow", Size: 128, Steps: 4, Seed: 42, CFG: 2.5, Threads: 2, Tokenizer: tok}
	if s := os.Getenv("SDTOOL_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		r.Threads = n
	}
	spec, _ := json.Marshal(r)
	inferutil.BenchVsSDCLI(b, bin, inferutil.SDCLIBench{Args: r.sdcliArgs(filepath.Join(b.TempDir(), "sdcli.png")), Steps: r.Steps, Child: "TestQwenImageGenerateChild", Env: qwenImageChildEnv, Spec: spec})
}

// TestQwenImageImatrixMatchesSDCLI collects the importance matrix of one
// step on both sides, for an English and a Chinese prompt: the same
// weights under the same names (the DiT's and the LLM's linear weights as
// their files name them), and per weight mean squared activations that
// agree, which follows the activations through the LLM and every DiT block.
func TestQwenImageImatrixMatchesSDCLI(t *testing.T) {
	bin, tok := qwenImageParityEnv(t)
	parts, _ := qwenImageParityFiles(t)
	for _, prompt := range []string{"a red fox in the snow", "一只橘猫坐在窗台上，阳光明媚"} {
		t.Run(prompt, func(t *testing.T) {
			// One pass (cfg 1): the two programs average the statistics of
			// passes of different lengths differently.
			r := qwenImageParityRun{Parts: parts, Prompt: prompt, Size: 128, Steps: 1, Seed: 42, CFG: 1, Threads: 2, Tokenizer: tok}
			compareImatrixWithSDCLI(t, bin, r)
		})
	}
}

// sdcliLLMPrefix is the part of sd-cli's internal LLM names that the
// component file's names lack ("model.layers.0..." stays).
const sdcliLLMPrefix = "text_encoders.llm."

// compareImatrixWithSDCLI runs r once in sd-cli with --imat-out and once
// in sdtool collecting an imatrix, and compares the two entry by entry.
func compareImatrixWithSDCLI(t *testing.T, bin string, r qwenImageParityRun) {
	dat := filepath.Join(t.TempDir(), "sdcli.dat")
	r.SDCLIExtraFlags = []string{"--imat-out", dat}
	cmd := exec.Command(bin, r.sdcliArgs(filepath.Join(t.TempDir(), "sdcli.png"))...)
	if log, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
	}
	theirs, err := imatrix.OpenDat(dat)
	if err != nil {
		t.Fatal(err)
	}
	m := r.load(t)
	defer m.Close()
	s, _ := inferutil.CollectTiny(t, m, r.request(), "")
	ours := s.Matrix("")
	// sd-cli names weights by their internal names; sdtool as the
	// component files name them, so that the matrix fits those files.
	name := func(n string) string {
		return strings.TrimPrefix(strings.TrimPrefix(n, infer.DmPrefix), sdcliLLMPrefix)
	}
	var names []string
	for _, n := range theirs.Names() {
		names = append(names, name(n))
	}
	// ggml leaves out of sd-cli's graph what nothing reads: the last
	// block's text stream after its attention.
	last := "transformer_blocks." + strconv.Itoa(m.Config.Network.(*QwenImageConfig).Layers-1) + "."
	for _, n := range []string{"attn.to_add_out.weight", "txt_mlp.net.0.proj.weight", "txt_mlp.net.2.weight"} {
		if _, ok := theirs.Lookup(infer.DmPrefix + last + n); !ok {
			names = append(names, last+n)
		}
	}
	slices.Sort(names)
	if !slices.Equal(ours.Names(), names) {
		t.Errorf("names differ:\nours   %q\nsd-cli %q", ours.Names(), names)
	}
	for _, g := range theirs.Entries {
		e, ok := ours.Lookup(name(g.Name))
		if !ok {
			continue
		}
		a, b := e.Mean(), g.Mean()
		if len(a) != len(b) {
			t.Errorf("%s: %d columns, sd-cli %d", g.Name, len(a), len(b))
			continue
		}
		rel := inferutil.MaxRelErr(t, a, b)
		t.Logf("%-70s calls %d/%d  rel %.2e", g.Name, e.NCall, g.NCall, rel)
		// Both programs compute the step's LLM and DiT bit for bit alike, so
		// the entries differ only by the two collectors' summations (about
		// 3e-7); a last bit anywhere upstream grows through the q8_0
		// activations to 1e-4 or more.
		if rel > 1e-5 {
			t.Errorf("%s: mean squared activations differ from sd-cli's by %.2e (relative), want at most 1e-5", g.Name, rel)
		}
	}
}

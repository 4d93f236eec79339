//go:build cgo

package llm

import (
	"context"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
	"github.com/sdtool/sdtool/tensor"
)

// The LLM against stable-diffusion.cpp inside one of its runs: sd-cli's
// imatrix (--imat-out) holds, for every linear weight it ran, the mean
// square of each input column over the tokens it saw. For the LLM that is
// the normed residual (q, k, v, gate, up), the attention output (o) and
// the SwiGLU product (down) of every layer; the DiT's cap_embedder.1 sees
// the hidden states the conditioner kept, RMS-normed (its cap_embedder.0
// is written as ones), so the final states are compared too. sd-cli needs
// a whole Z-Image model to run: a narrow synthetic DiT (width 256, one
// block of each kind; sd.cpp reads widths and depths from the shapes) and
// the Flux VAE of synth.FluxParity (sd.cpp takes the encoder at full width).

// qwenTokenizerEnv names the environment variable holding Qwen's tokenizer.json.
const qwenTokenizerEnv = "SDTOOL_QWEN_TOKENIZER"

// zimageTestDiT writes a narrow Z-Image DiT (width 256, heads of 128, one
// noise refiner, one context refiner and one layer) for sd-cli's
// --diffusion-model, reading a Qwen3-4B context (2560 wide).
func zimageTestDiT(t *testing.T, path string) {
	t.Helper()
	const h, ff, patch, ctx = 256, 768, 64, 2560
	var ts []synth.TensorSpec
	add := func(name string, init synth.Init, shape ...int64) {
		ts = append(ts, synth.TensorSpec{Name: name, Shape: shape, Type: formats.F32, Init: init})
	}
	add("x_embedder.weight", synth.InitWeight, h, patch)
	add("x_embedder.bias", synth.InitBias, h)
	add("t_embedder.mlp.0.weight", synth.InitWeight, h, 256)
	add("t_embedder.mlp.0.bias", synth.InitBias, h)
	add("t_embedder.mlp.2.weight", synth.InitWeight, 256, h)
	add("t_embedder.mlp.2.bias", synth.InitBias, 256)
	add("cap_embedder.0.weight", synth.InitOne, ctx) // written as exact ones below
	add("cap_embedder.1.weight", synth.InitWeight, h, ctx)
	add("cap_embedder.1.bias", synth.InitBias, h)
	add("cap_pad_token", synth.InitBias, h)
	add("x_pad_token", synth.InitBias, h)
	for _, b := range []struct {
		prefix string
		mod    bool
	}{{"noise_refiner.0.", true}, {"context_refiner.0.", false}, {"layers.0.", true}} {
		add(b.prefix+"attention.qkv.weight", synth.InitWeight, 6*128, h)
		add(b.prefix+"attention.out.weight", synth.InitWeight, h, h)
		add(b.prefix+"attention.q_norm.weight", synth.InitOne, 128)
		add(b.prefix+"attention.k_norm.weight", synth.InitOne, 128)
		add(b.prefix+"feed_forward.w1.weight", synth.InitWeight, ff, h)
		add(b.prefix+"feed_forward.w2.weight", synth.InitWeight, h, ff)
		add(b.prefix+"feed_forward.w3.weight", synth.InitWeight, ff, h)
		for _, n := range []string{"attention_norm1", "ffn_norm1", "attention_norm2", "ffn_norm2"} {
			add(b.prefix+n+".weight", synth.InitOne, h)
		}
		if b.mod {
			add(b.prefix+"adaLN_modulation.0.weight", synth.InitWeight, 4*h, 256)
			add(b.prefix+"adaLN_modulation.0.bias", synth.InitBias, 4*h)
		}
	}
	add("final_layer.linear.weight", synth.InitWeight, patch, h)
	add("final_layer.linear.bias", synth.InitBias, patch)
	add("final_layer.adaLN_modulation.1.weight", synth.InitWeight, h, 256)
	add("final_layer.adaLN_modulation.1.bias", synth.InitBias, h)
	desc := make([]formats.Tensor, len(ts))
	for i, s := range ts {
		desc[i] = formats.Tensor{Name: s.Name, Type: formats.F32, Shape: s.Shape}
	}
	err := pipeline.WriteAtomic(context.Background(), path, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
		tw, err := gguf.NewWriter(w, desc, nil, nil)
		if err != nil {
			return err
		}
		spec := synth.Spec{Seed: 5, DType: formats.F32}
		for _, s := range ts {
			var r io.Reader = synth.Data(spec, s)
			if s.Name == "cap_embedder.0.weight" {
				r = onesF32(ctx)
			}
			if _, err := io.Copy(tw, r); err != nil {
				return err
			}
		}
		return tw.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// onesF32 reads n little-endian float32 ones.
func onesF32(n int) io.Reader {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		copy(b[4*i:], []byte{0, 0, 0x80, 0x3f})
	}
	return &byteReader{b: b}
}

type byteReader struct{ b []byte }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// llmParity is one comparison with sd-cli: the LLM file to write, the
// DiT and VAE files sd-cli runs it with, the family's template, and the
// DiT's first weight on the context with the RMSNorm before it.
type llmParity struct {
	llm              synth.LLM
	llmPath          string
	dit, vae         string
	prompt           LLMPrompt
	ctxNorm, ctxLin  string
	ctxEps           float64
	prompts          []string
	sdcliExtra       []string
	tokenizer, sdcli string
}

// sdcliLLMEnv returns sd-cli's and Qwen's tokenizer's paths, or skips.
func sdcliLLMEnv(t *testing.T) (bin, tok string) {
	t.Helper()
	longtest.Skip(t, "LLM parity against sd-cli")
	bin = os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		t.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	inferutil.RequireParityBuild(t)
	tok = os.Getenv(qwenTokenizerEnv)
	if tok == "" {
		t.Skipf("%s is not set (Qwen's tokenizer.json, which sd-cli must be built with)", qwenTokenizerEnv)
	}
	return bin, tok
}

// run writes the LLM (unless there), runs sd-cli and sdtool on each
// prompt and compares the imatrix entries of every LLM linear weight and
// of the DiT's context weight.
func (c llmParity) run(t *testing.T) {
	// The sd-cli that ../shared/tools/build-sdcli makes drops Qwen's last
	// merge (its merges text has no final newline), so it numbers every
	// control token one lower than Qwen does: rows from that merge's id on
	// are made equal, so that <|im_start|> reads the same row either way.
	c.llm.SameRowsFrom = 151642
	if _, err := os.Stat(c.llmPath); err != nil {
		if err := c.llm.Write(c.llmPath); err != nil {
			t.Fatal(err)
		}
	}
	norm := readF32Tensor(t, c.dit, c.ctxNorm)
	m := loadLLMComponent(t, c.llmPath, infer.LoadOptions{Threads: 2, Tokenizers: map[string]string{"llm": c.tokenizer}})
	internal := map[string]string{}
	for _, sp := range m.Specs {
		internal[sp.Src.Name] = sp.Name
	}
	dir := t.TempDir()
	for i, prompt := range c.prompts {
		imat := filepath.Join(dir, "imat"+strconv.Itoa(i)+".dat")
		args := append([]string{"--diffusion-model", c.dit, "--llm", c.llmPath, "--vae", c.vae, "-p", prompt, "-W", "64", "-H", "64",
			"--steps", "1", "--cfg-scale", "1", "-s", "1", "-t", "2", "-o", filepath.Join(dir, "out.png"), "--imat-out", imat}, c.sdcliExtra...)
		if out, err := exec.Command(c.sdcli, args...).CombinedOutput(); err != nil {
			t.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(out))
		}
		ref, err := imatrix.Open(imat)
		if err != nil {
			t.Fatal(err)
		}
		s := infer.NewImatrixStats()
		m.SetImatrix(s)
		h, n, err := EncodeLLMPrompt(m, prompt, c.prompt)
		m.SetImatrix(nil)
		if err != nil {
			t.Fatal(err)
		}
		compared, worst := 0, 0.0
		check := func(name string, sum2 []float32, count float64) {
			g, ok := ref.Lookup(name)
			if !ok || len(g.Sum2) != len(sum2) || len(g.Counts) != 1 {
				t.Errorf("%q: sd-cli's imatrix has no matching entry", name)
				return
			}
			var d, mx float64
			for j := range sum2 {
				a := float64(sum2[j]) / count
				b := float64(g.Sum2[j]) / float64(g.Counts[0])
				d = math.Max(d, math.Abs(a-b))
				mx = math.Max(mx, math.Abs(b))
			}
			// The LLM computes what sd-cli's does bit for bit, so only the
			// collectors' summations differ (about 3e-7); a last bit upstream
			// grows through the q8_0 activations to 1e-4 or more.
			if rel := d / mx; rel > 1e-5 {
				t.Errorf("prompt %d: %s: mean squares differ from sd-cli's by %.3g (relative to their largest)", i, name, rel)
			} else {
				worst = math.Max(worst, rel)
			}
			compared++
		}
		for _, e := range s.Matrix("").Entries {
			check(internal[e.Name], e.Sum2, float64(e.Counts[0]))
		}
		check(c.ctxLin, contextSquares(h, n, norm, c.ctxEps), float64(n))
		if want := 7*LLM(m.Config).Layers + 1; compared < want {
			t.Errorf("prompt %d: compared %d weights, want %d (every LLM linear weight and the context)", i, compared, want)
		}
		t.Logf("prompt %d: %d tokens, %d weights within %.3g of sd-cli's mean squares", i, n, compared, worst)
	}
}

// contextSquares sums, per column, the squares of the hidden states n rows
// after the DiT's RMSNorm with weight w: what its first context weight sees.
func contextSquares(h []float32, n int, w []float32, eps float64) []float32 {
	width := len(w)
	sum2 := make([]float32, width)
	for k := 0; k < n; k++ {
		row := h[k*width : (k+1)*width]
		var ms float64
		for _, v := range row {
			ms += float64(v) * float64(v)
		}
		r := 1 / math.Sqrt(ms/float64(width)+eps)
		for j, v := range row {
			y := float64(v) * r * float64(w[j])
			sum2[j] += float32(y * y)
		}
	}
	return sum2
}

// readF32Tensor reads one tensor of a file as float32.
func readF32Tensor(t *testing.T, path, name string) []float32 {
	t.Helper()
	m, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, d := range m.Tensors() {
		if d.Name == name {
			out := make([]float32, d.Elements())
			if err := tensor.Plain(m, d).Read(out, 0, new(tensor.Scratch)); err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	t.Fatalf("%s has no tensor %q", path, name)
	return nil
}

// TestLLMMatchesSDCLIImatrix runs sd-cli on a Z-Image model whose --llm
// is Qwen3-4B at full width, two layers deep (synth.Qwen3x4B), for a
// table of prompts, and compares its imatrix with the one sdtool collects
// encoding the same prompts.
func TestLLMMatchesSDCLIImatrix(t *testing.T) {
	bin, tok := sdcliLLMEnv(t)
	// SDTOOL_LLM_PARITY_DIR keeps the files between runs (written once).
	dir := os.Getenv("SDTOOL_LLM_PARITY_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	dit, vae := filepath.Join(dir, "dit.gguf"), filepath.Join(dir, "vae.gguf")
	if _, err := os.Stat(vae); err != nil {
		zimageTestDiT(t, dit)
		err := pipeline.WriteAtomic(context.Background(), vae, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
			return synth.FluxParity.EncodePart(w, "gguf", "vae")
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	llmParity{llm: synth.Qwen3x4B, llmPath: filepath.Join(dir, "llm.gguf"), dit: dit, vae: vae, prompt: ZImagePrompt,
		ctxNorm: "cap_embedder.0.weight", ctxLin: "model.diffusion_model.cap_embedder.1.weight", ctxEps: 1e-5,
		prompts: []string{
			"a photo of a cat sitting on a wooden table, golden hour",
			"一只可爱的小猫坐在木桌上，金色的阳光。 (sharp focus:1.3), 8k",
		}, tokenizer: tok, sdcli: bin}.run(t)
}

// TestQwen25VLMatchesSDCLIImatrix is the same comparison for Qwen2.5-VL's
// text model (synth.Qwen25VLEncoder7B: 3584 wide, two layers) in a
// Qwen-Image model, whose DiT (full width, sd.cpp does not read it from the
// shapes) and Wan VAE come from SDTOOL_QWENIMAGE_DIT and
// SDTOOL_QWENIMAGE_VAE (the qwenimage branch's synth.QwenImage writes them).
func TestQwen25VLMatchesSDCLIImatrix(t *testing.T) {
	bin, tok := sdcliLLMEnv(t)
	dit, vae := os.Getenv("SDTOOL_QWENIMAGE_DIT"), os.Getenv("SDTOOL_QWENIMAGE_VAE")
	if dit == "" || vae == "" {
		t.Skip("SDTOOL_QWENIMAGE_DIT and SDTOOL_QWENIMAGE_VAE are not set (a Qwen-Image DiT and VAE for sd-cli)")
	}
	dir := os.Getenv("SDTOOL_LLM_PARITY_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	llmParity{llm: synth.Qwen25VLEncoder7B, llmPath: filepath.Join(dir, "qwen25vl.gguf"), dit: dit, vae: vae, prompt: QwenImagePrompt,
		ctxNorm: "txt_norm.weight", ctxLin: "model.diffusion_model.txt_in.weight", ctxEps: 1e-6,
		prompts: []string{
			"a red fox in the snow, (watercolor:1.2)",
			"海报上写着“通义千问”四个大字",
			"一只橘猫", // 42 tokens with the template: a tail of 10 past the attention's run of 32
		}, tokenizer: tok, sdcli: bin}.run(t)
}

//go:build cgo

package infer

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
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
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

// TestLLMMatchesSDCLIImatrix runs sd-cli on a Z-Image model whose --llm
// is Qwen3-4B at full width, two layers deep (synth.Qwen3x4B), for a table
// of prompts, and compares its imatrix with the one sdtool collects
// encoding the same prompts.
func TestLLMMatchesSDCLIImatrix(t *testing.T) {
	longtest.Skip(t, "LLM parity against sd-cli")
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		t.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	tokPath := os.Getenv(qwenTokenizerEnv)
	if tokPath == "" {
		t.Skipf("%s is not set (Qwen's tokenizer.json, which sd-cli must be built with)", qwenTokenizerEnv)
	}
	// SDTOOL_LLM_PARITY_DIR keeps the files between runs (written once).
	dir := os.Getenv("SDTOOL_LLM_PARITY_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	llm, dit, vae := filepath.Join(dir, "llm.gguf"), filepath.Join(dir, "dit.gguf"), filepath.Join(dir, "vae.gguf")
	// The sd-cli that ../shared/tools/build-sdcli makes drops Qwen's last
	// merge (its merges text has no final newline), so it numbers every
	// control token one lower than Qwen does: rows from that merge's id on
	// are made equal, so that <|im_start|> reads the same row either way.
	q := synth.Qwen3x4B
	q.SameRowsFrom = 151642
	if _, err := os.Stat(vae); err != nil {
		if err := q.Write(llm); err != nil {
			t.Fatal(err)
		}
		zimageTestDiT(t, dit)
		err := pipeline.WriteAtomic(context.Background(), vae, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
			return synth.FluxParity.EncodePart(w, "gguf", "vae")
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	m := loadLLMComponent(t, llm, LoadOptions{Threads: 2, Tokenizers: map[string]string{"llm": tokPath}})
	internal := map[string]string{}
	for _, sp := range m.specs {
		internal[sp.src.Name] = sp.Name
	}
	for i, prompt := range []string{
		"a photo of a cat sitting on a wooden table, golden hour",
		"一只可爱的小猫坐在木桌上，金色的阳光。 (sharp focus:1.3), 8k",
	} {
		imat := filepath.Join(dir, "imat"+strconv.Itoa(i)+".gguf")
		cmd := exec.Command(bin, "--diffusion-model", dit, "--llm", llm, "--vae", vae, "-p", prompt, "-W", "64", "-H", "64",
			"--steps", "1", "--cfg-scale", "1", "-s", "1", "-t", "2", "-o", filepath.Join(dir, "out.png"), "--imat-out", imat)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sd-cli: %v\n%s", err, tail(out))
		}
		ref, err := imatrix.Open(imat)
		if err != nil {
			t.Fatal(err)
		}
		s := NewImatrixStats()
		m.SetImatrix(s)
		h, n, err := m.EncodeLLMPrompt(prompt, ZImagePrompt)
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
			if rel := d / mx; rel > 1e-2 {
				t.Errorf("prompt %d: %s: mean squares differ from sd-cli's by %.3g (relative to their largest)", i, name, rel)
			} else {
				worst = math.Max(worst, rel)
			}
			compared++
		}
		for _, e := range s.Matrix("").Entries {
			check(internal[e.Name], e.Sum2, float64(e.Counts[0]))
		}
		// The conditioning itself, as the DiT's cap_embedder.1 saw it.
		hidden := m.Config.llm().Hidden
		sum2 := make([]float32, hidden)
		for k := 0; k < n; k++ {
			row := h[k*hidden : (k+1)*hidden]
			var ms float64
			for _, v := range row {
				ms += float64(v) * float64(v)
			}
			r := 1 / math.Sqrt(ms/float64(hidden)+1e-5)
			for j, v := range row {
				sum2[j] += float32(float64(v) * r * float64(v) * r)
			}
		}
		check("model.diffusion_model.cap_embedder.1.weight", sum2, float64(n))
		if compared < 2*7+1 {
			t.Errorf("prompt %d: compared %d weights, want the 14 linear weights of both layers and the context", i, compared)
		}
		t.Logf("prompt %d: %d tokens, %d weights within %.3g of sd-cli's mean squares", i, n, compared, worst)
	}
}

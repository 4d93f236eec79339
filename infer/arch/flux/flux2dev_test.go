//go:build cgo

package flux

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	_ "github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/llm"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
)

// tinyDev loads testdata/tiny-flux2-dev.gguf (synth.TinyDev: Flux.2 dev's
// 48 single blocks and guidance embedding, a two-layer Mistral).
func tinyDev(t *testing.T) *infer.Model {
	t.Helper()
	m, err := infer.Load(infer.Components{"model": filepath.Join("..", "..", "..", "testdata", "tiny-flux2-dev.gguf")}, infer.LoadOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestTinyDevConditions checks synth.TinyDev's detection and conditioning:
// the family is dev, the LLM is Mistral's architecture, the context is
// DevPrompt's tokens (BOS first) followed by zero rows up to 512, and the
// component files with the LLM under llama.cpp's names give the same.
func TestTinyDevConditions(t *testing.T) {
	m := tinyDev(t)
	c := synth.TinyDev
	c.LLM.GGUFNames = true
	parts, err := c.WriteParts(t.TempDir(), "tiny-dev", "gguf")
	if err != nil {
		t.Fatal(err)
	}
	split, err := infer.Load(infer.Components{"diffusion-model": parts["diffusion-model"], "llm": parts["llm"], "vae": parts["vae"]}, infer.LoadOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer split.Close()
	if m.Family.Name() != "flux2-dev" {
		t.Errorf("family %s, want flux2-dev", m.Family.Name())
	}
	if l := llm.LLM(m.Config); l.Arch.Name != "mistral" || l.HeadDim != 128 || l.Heads != 2 || l.KVHeads != 1 {
		t.Errorf("LLM %+v, want the synthetic Mistral", l)
	}
	ids, _, err := llm.PromptLayout(llm.Tokenizer(m), "a cat", DevPrompt)
	if err != nil {
		t.Fatal(err)
	}
	n := len(ids) + 1 // BOS
	cond, err := m.Encode("a cat", 32, 32)
	if err != nil {
		t.Fatal(err)
	}
	d := cond.Dim
	if other, err := split.Encode("a cat", 32, 32); err != nil || !slices.Equal(other.Context, cond.Context) {
		t.Errorf("the component files (llama.cpp's LLM names) give another context (%v)", err)
	}
	if cond.Tokens != 512 || d != synth.TinyDev.Context || len(cond.Context) != 512*d || n >= 512 {
		t.Fatalf("conditioning of %d tokens %d wide (%d values) for %d prompt tokens, want 512 of %d", cond.Tokens, d, len(cond.Context), n, synth.TinyDev.Context)
	}
	nonzero := func(row int) bool {
		return slices.ContainsFunc(cond.Context[row*d:(row+1)*d], func(v float32) bool { return v != 0 })
	}
	if !nonzero(0) || !nonzero(n-1) || nonzero(n) || nonzero(511) {
		t.Errorf("rows 0, %d, %d and 511 nonzero: %v %v %v %v; want the tokens' rows nonzero and the padding zero",
			n-1, n, nonzero(0), nonzero(n-1), nonzero(n), nonzero(511))
	}
}

// TestTinyDevGenerates renders synth.TinyDev with two guidance values (32x32,
// one step): finite images, and different ones, so the guidance embedding is
// read (a few seconds: 49 blocks over 512 text tokens, twice).
func TestTinyDevGenerates(t *testing.T) {
	longtest.Skip(t, "Flux.2 dev's tiny model, rendered twice")
	m := tinyDev(t)
	gen := func(guidance float32) []float32 {
		res, err := m.Generate(infer.Request{Prompt: "a cat", Width: 32, Height: 32, Steps: 1, CFGScale: 1, Guidance: guidance, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Pixels {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("pixel %v", v)
			}
		}
		return res.Pixels
	}
	if slices.Equal(gen(1), gen(4)) {
		t.Error("guidance 1 and 4 give the same image: the guidance embedding is not read")
	}
}

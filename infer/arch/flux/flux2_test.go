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
	"github.com/sdtool/sdtool/internal/synth"
)

// TestTinyKleinGenerates runs testdata/tiny-flux2-klein.gguf
// (synth.TinyKlein): Flux.2 klein, its context KleinPrompt's tokens padded
// to 512 (three hidden states wide for a deep enough encoder; a two-layer
// one gives its final norm's alone, as sd.cpp), another context for
// another prompt, the same context from the component files, and a finite
// image (32x32 in one step, to keep the default run short).
func TestTinyKleinGenerates(t *testing.T) {
	parts, err := synth.TinyKlein.WriteParts(t.TempDir(), "tiny", "gguf")
	if err != nil {
		t.Fatal(err)
	}
	load := func(c infer.Components) *infer.Model {
		m, err := infer.Load(c, infer.LoadOptions{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		if m.Family.Name() != "flux2-klein" {
			t.Errorf("family %s, want flux2-klein", m.Family.Name())
		}
		return m
	}
	encode := func(m *infer.Model, p string) *infer.Conditioning {
		c, err := m.Encode(p, 32, 32)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	m := load(infer.Components{"model": filepath.Join("..", "..", "..", "testdata", "tiny-flux2-klein.gguf")})
	cond := encode(m, "a cat")
	if cond.Tokens != 512 || cond.Dim != synth.TinyKlein.Context || len(cond.Context) != 512*cond.Dim {
		t.Errorf("conditioning of %d tokens %d wide (%d values), want 512 of %d", cond.Tokens, cond.Dim, len(cond.Context), synth.TinyKlein.Context)
	}
	if slices.Equal(cond.Context, encode(m, "a red house").Context) {
		t.Error("two prompts give the same context")
	}
	split := load(infer.Components{"diffusion-model": parts["diffusion-model"], "llm": parts["llm"], "vae": parts["vae"]})
	if !slices.Equal(cond.Context, encode(split, "a cat").Context) {
		t.Error("the single file and the component files give different contexts")
	}
	l := llm.LLM(m.Config)
	for _, tc := range []struct {
		layers []int
		want   int
	}{{[]int{9, 18, 27}, 1}, {[]int{1, 2}, 2}, {[]int{1, 3, 27}, 2}} {
		outs, norm := llm.LLMOutputs(l, tc.layers)
		if n := len(outs) + map[bool]int{true: 1}[norm]; n != tc.want {
			t.Errorf("layers %v of %d: %d hidden states, want %d", tc.layers, l.Layers, n, tc.want)
		}
	}
	res, err := m.Generate(infer.Request{Prompt: "a cat", Width: 32, Height: 32, Steps: 1, CFGScale: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, v := range res.Pixels {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("pixel %v", v)
		}
		sum += math.Abs(float64(v))
	}
	if sum == 0 {
		t.Error("a black image")
	}
}

// TestTinyKleinRefImages runs testdata/tiny-flux2-klein.gguf with
// reference images (sd-cli's -r): a second reference, of another shape
// than the render's (resized by sd-cli's rule), changes the image of one
// (two renders: the text encoder's 512 tokens make each cost). sd-cli's
// own images are TestKleinRefImagesMatchesSDCLI's.
func TestTinyKleinRefImages(t *testing.T) {
	m, err := infer.Load(infer.Components{"model": filepath.Join("..", "..", "..", "testdata", "tiny-flux2-klein.gguf")}, infer.LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ref := func(w, h int, seed float64) infer.RefImage {
		pix := make([]float32, 3*w*h)
		for i := range pix {
			pix[i] = float32(math.Sin(seed * float64(i) / 7))
		}
		return infer.RefImage{Pixels: pix, Width: w, Height: h}
	}
	render := func(refs ...infer.RefImage) []float32 {
		res, err := m.Generate(infer.Request{Prompt: "a cat", Width: 16, Height: 16, Steps: 1, CFGScale: 1, Seed: 1, Refs: refs})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Pixels {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%d references: pixel %v", len(refs), v)
			}
		}
		return res.Pixels
	}
	a, b := ref(16, 16, 1), ref(48, 16, 2) // b is encoded at 32x16
	if slices.Equal(render(a), render(a, b)) {
		t.Error("a second reference image left the image as it was")
	}
}

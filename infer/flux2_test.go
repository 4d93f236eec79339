//go:build cgo

package infer

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	_ "github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/internal/synth"
)

// TestTinyKleinGenerates loads synth.TinyKlein from one file and from
// component files: both are Flux.2 klein, condition on 512 text tokens
// of three hidden states' width, and give the same finite image that the
// prompt changes.
func TestTinyKleinGenerates(t *testing.T) {
	dir := t.TempDir()
	single := filepath.Join(dir, "tiny-flux2-klein.gguf")
	if err := synth.TinyKlein.WriteSingle(single); err != nil {
		t.Fatal(err)
	}
	parts, err := synth.TinyKlein.WriteParts(dir, "tiny", "gguf")
	if err != nil {
		t.Fatal(err)
	}
	var images [][]float32
	for _, c := range []Components{
		{"model": single},
		{"diffusion-model": parts["diffusion-model"], "llm": parts["llm"], "vae": parts["vae"]},
	} {
		m, err := Load(c, LoadOptions{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		if m.Family.Name() != "flux2-klein" {
			t.Errorf("family %s, want flux2-klein", m.Family.Name())
		}
		cond, err := m.Encode("a cat", 64, 64)
		if err != nil {
			t.Fatal(err)
		}
		if cond.Tokens != 512 || cond.Dim != synth.TinyKlein.Context {
			t.Errorf("conditioning of %d tokens %d wide, want 512 of %d", cond.Tokens, cond.Dim, synth.TinyKlein.Context)
		}
		for _, p := range []string{"a cat", "a red house"} {
			res, err := m.Generate(Request{Prompt: p, Width: 64, Height: 64, Steps: 2, CFGScale: 1, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range res.Pixels {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("%q: pixel %v", p, v)
				}
			}
			images = append(images, res.Pixels)
		}
		m.Close()
	}
	if !slices.Equal(images[0], images[2]) || !slices.Equal(images[1], images[3]) {
		t.Error("the single file and the component files give different images")
	}
	if slices.Equal(images[0], images[1]) {
		t.Error("two prompts give the same image")
	}
}

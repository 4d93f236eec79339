//go:build cgo

package qwenimage

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/internal/synth"
)

// TestTinyQwenImageGenerates runs synth.TinyQwenImage from one file and
// from component files: the same pixels, no NaN, and a prompt that changes
// the image (the conditioning reaches it).
func TestTinyQwenImageGenerates(t *testing.T) {
	dir := t.TempDir()
	single := filepath.Join(dir, "tiny-qwen-image.gguf")
	if err := synth.TinyQwenImage.WriteSingle(single); err != nil {
		t.Fatal(err)
	}
	parts, err := synth.TinyQwenImage.WriteParts(dir, "tiny", "gguf")
	if err != nil {
		t.Fatal(err)
	}
	comps := map[string]infer.Components{
		"single": {"model": single},
		"parts":  {"diffusion-model": parts["diffusion-model"], "llm": parts["llm"], "vae": parts["vae"]},
	}
	req := infer.Request{Prompt: "a cat, 一只猫", Width: 64, Height: 64, Steps: 2, CFGScale: 2.5, Method: infer.Euler, Seed: 1}
	var first []float32
	for _, name := range []string{"single", "parts"} {
		m, err := infer.Load(comps[name], infer.LoadOptions{Threads: 1})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.Family.Name() != "qwen_image" {
			t.Errorf("%s: family %s, want qwen_image", name, m.Family.Name())
		}
		res, err := m.Generate(req)
		if err == nil && first == nil {
			other := req
			other.Prompt = "a dog"
			var alt *infer.Result
			if alt, err = m.Generate(other); err == nil && qwenImageMaxDiff(alt.Pixels, res.Pixels) == 0 {
				t.Errorf("%s: another prompt gives the same image", name)
			}
		}
		m.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.NaNPixels > 0 || len(res.Pixels) != 3*64*64 {
			t.Fatalf("%s: %d NaN pixels of %d", name, res.NaNPixels, len(res.Pixels))
		}
		if first == nil {
			first = res.Pixels
		} else if d := qwenImageMaxDiff(first, res.Pixels); d != 0 {
			t.Errorf("%s: pixels differ from the single file's by up to %g", name, d)
		}
	}
}

func qwenImageMaxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

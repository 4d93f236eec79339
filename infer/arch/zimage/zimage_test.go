//go:build cgo

package zimage

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/synth"
)

// TestTinyZImageGenerates loads synth.TinyZImage as one file (the
// committed testdata/tiny-z-image.gguf's layout, tokenizer embedded) and
// as component files: both give the same finite image, and a different
// prompt gives a different one.
func TestTinyZImageGenerates(t *testing.T) {
	dir := t.TempDir()
	single := filepath.Join(dir, "tiny-z-image.gguf")
	if err := synth.TinyZImage.WriteSingle(single); err != nil {
		t.Fatal(err)
	}
	parts, err := synth.TinyZImage.WriteParts(dir, "tiny", "gguf")
	if err != nil {
		t.Fatal(err)
	}
	req := infer.Request{Prompt: "a red cat", Width: 16, Height: 16, Steps: 2, CFGScale: 1, Seed: 1}
	var first []float32
	for _, c := range []infer.Components{{"model": single}, {"diffusion-model": parts["diffusion-model"], "llm": parts["llm"], "vae": parts["vae"]}} {
		m, err := infer.Load(c, infer.LoadOptions{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if m.Family.Name() != "z_image" {
			t.Errorf("family %s, want z_image", m.Family.Name())
		}
		res, err := m.Generate(req)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range res.Pixels {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("pixel %d is %g", i, v)
			}
		}
		if first == nil {
			first = res.Pixels
			other := req
			other.Prompt = "a blue dog"
			res2, err := m.Generate(other)
			if err != nil {
				t.Fatal(err)
			}
			if inferutil.MaxRelErr(t, res2.Pixels, first) < 1e-3 {
				t.Error("another prompt gives the same image: the text does not reach the DiT")
			}
			continue
		}
		for i := range first {
			if first[i] != res.Pixels[i] {
				t.Fatalf("pixel %d is %g from the component files, %g from the single file", i, res.Pixels[i], first[i])
			}
		}
	}
}

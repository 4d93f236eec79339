//go:build cgo

package flux

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"testing"

	_ "github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
)

// writeTinyFlux writes synth.TinyFlux as one file and as component files.
func writeTinyFlux(t *testing.T) (single string, parts map[string]string) {
	t.Helper()
	dir := t.TempDir()
	single = filepath.Join(dir, "tiny-flux.gguf")
	if err := synth.TinyFlux.WriteSingle(single); err != nil {
		t.Fatal(err)
	}
	parts, err := synth.TinyFlux.WriteParts(dir, "tiny", "gguf")
	if err != nil {
		t.Fatal(err)
	}
	return single, parts
}

func TestTinyFluxGenerates(t *testing.T) {
	single, parts := writeTinyFlux(t)
	// The same model in one file whose VAE carries the LDM prefix.
	ldm := filepath.Join(filepath.Dir(single), "tiny-flux-ldm.gguf")
	err := pipeline.WriteAtomic(context.Background(), ldm, pipeline.PublishOptions{}, func(w io.Writer) error {
		return synth.TinyFlux.EncodeSingleAs(w, "gguf", synth.LDMPrefix)
	})
	if err != nil {
		t.Fatal(err)
	}
	comps := map[string]infer.Components{
		"single": {"model": single},
		"parts":  {"diffusion-model": parts["diffusion-model"], "clip_l": parts["clip_l"], "t5xxl": parts["t5xxl"], "vae": parts["vae"]},
		"ldm":    {"model": ldm},
	}
	var first []float32
	for _, name := range []string{"single", "parts", "ldm"} {
		m, err := infer.Load(comps[name], infer.LoadOptions{Threads: 1})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.Family.Name() != "flux-dev" {
			t.Errorf("%s: family %s, want flux-dev", name, m.Family.Name())
		}
		res, err := m.Generate(infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 2, CFGScale: 1, Guidance: 3.5, Seed: 1})
		m.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var s float64
		for _, v := range res.Pixels {
			if math.IsNaN(float64(v)) {
				t.Fatalf("%s: NaN", name)
			}
			s += math.Abs(float64(v))
		}
		t.Logf("%s: mean |pixel| %.4f", name, s/float64(len(res.Pixels)))
		if first == nil {
			first = res.Pixels
		} else {
			for i := range first {
				if first[i] != res.Pixels[i] {
					t.Fatalf("%s: pixel %d is %g, the single file gives %g", name, i, res.Pixels[i], first[i])
				}
			}
		}
	}
}

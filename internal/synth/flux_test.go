package synth

import (
	"bytes"
	"os"
	"testing"

	_ "github.com/sdtool/sdtool/formats/safetensors"
)

// testdata/tiny-flux.gguf is TinyFlux's single file; SDTOOL_WRITE_TESTDATA=1 rewrites it.
func TestTinyFluxTestdata(t *testing.T) {
	const path = "../../testdata/tiny-flux.gguf"
	var b bytes.Buffer
	if err := TinyFlux.EncodeSingle(&b, "gguf"); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SDTOOL_WRITE_TESTDATA") != "" {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Errorf("%s differs from TinyFlux (%d bytes, TinyFlux gives %d); rewrite it with SDTOOL_WRITE_TESTDATA=1", path, len(got), b.Len())
	}
	if b.Len() > 3<<20 {
		t.Errorf("TinyFlux is %d bytes, over 3 MB", b.Len())
	}
}

// The parts and the single file hold the same tensors: the single file's
// names are the parts' under ComfyUI's prefixes.
func TestFluxPartsAndSingle(t *testing.T) {
	n := 0
	for _, flag := range FluxParts {
		n += len(TinyFlux.Part(flag))
	}
	if n == 0 || len(TinyFlux.Part("t5xxl")) == 0 {
		t.Fatalf("TinyFlux has %d tensors, T5 %d", n, len(TinyFlux.Part("t5xxl")))
	}
	var b bytes.Buffer
	if err := FluxParity.EncodePart(&b, "safetensors", "vae"); err != nil {
		t.Fatal(err)
	}
	if b.Len() == 0 {
		t.Fatal("empty VAE file")
	}
}

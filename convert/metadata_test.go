package convert

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	_ "github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/pipeline"
)

const tinyGGUF = "../testdata/tiny-sd1.gguf"

// Converting keeps the model's metadata (the head counts and tokenizer that
// generate needs) in both output formats; --no-metadata writes none.
func TestConvertCarriesMetadata(t *testing.T) {
	src, err := formats.Open(tinyGGUF)
	if err != nil {
		t.Fatal(err)
	}
	want := src.Metadata()
	src.Close()
	dir := t.TempDir()
	for _, out := range []string{"q.gguf", "f.safetensors"} {
		typ := "q4_0"
		if strings.HasSuffix(out, ".safetensors") {
			typ = "f32"
		}
		path := filepath.Join(dir, out)
		if _, err := run(&Options{Inputs: map[string]string{"model": tinyGGUF}, Output: path, Type: typ,
			Metadata: []string{"sdtool.note=hello"}}, pipeline.Options{}); err != nil {
			t.Fatal(err)
		}
		m, err := formats.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got := m.Metadata()
		m.Close()
		for _, kv := range want {
			g, ok := got.Get(kv.Key)
			if !ok {
				t.Errorf("%s: metadata %s was dropped", out, kv.Key)
				continue
			}
			if out == "q.gguf" && (g.Type != kv.Type || g.Value != kv.Value) {
				t.Errorf("%s: %s = %v (%s), want %v (%s)", out, kv.Key, g.Value, g.Type, kv.Value, kv.Type)
			}
		}
		if v, _ := got.String("sdtool.note"); v != "hello" {
			t.Errorf("%s: --metadata sdtool.note = %q", out, v)
		}
		if v, _ := got.String("sdtool.unet.num_heads"); out == "f.safetensors" && v != "8" {
			t.Errorf("%s: head count %q, want the text 8", out, v)
		}
	}
	bare := filepath.Join(dir, "bare.gguf")
	if _, err := run(&Options{Inputs: map[string]string{"model": tinyGGUF}, Output: bare, NoMetadata: true}, pipeline.Options{}); err != nil {
		t.Fatal(err)
	}
	m, err := formats.Open(bare)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n := len(m.Metadata()); n != 0 {
		t.Errorf("--no-metadata wrote %d keys", n)
	}
	if _, err := Plan(&Options{Inputs: map[string]string{"model": tinyGGUF}, Output: bare, NoMetadata: true, Metadata: []string{"a=b"}}); err == nil {
		t.Error("--no-metadata with --metadata accepted")
	}
}

// A safetensors checkpoint whose only metadata is "format": "pt" (what
// PyTorch writes) converts to the same bytes with and without --no-metadata,
// so the default stays sd-cli's layout for such inputs.
func TestConvertFormatPtOnlyIsSDCLIBytes(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	ts := []formats.Tensor{{Name: "model.diffusion_model.a.weight", Type: formats.F32, Shape: []int64{2, 32}}}
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	w, err := safetensors.NewWriter(f, ts, map[string]string{"format": "pt"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, 4*64))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, ext := range []string{".gguf", ".safetensors"} {
		var outs [][]byte
		for i, nm := range []bool{false, true} {
			out := filepath.Join(dir, string(rune('a'+i))+ext)
			if _, err := run(&Options{Inputs: map[string]string{"model": in}, Output: out, Type: "f16", NoMetadata: nm}, pipeline.Options{}); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(out)
			outs = append(outs, b)
		}
		if !bytes.Equal(outs[0], outs[1]) {
			t.Errorf("%s: carrying \"format\" changed the bytes", ext)
		}
	}
}

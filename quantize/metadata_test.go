package quantize

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/text"
)

// A GGUF's model metadata (head counts, the embedded tokenizer) survives a
// quantization to ComfyUI INT8 safetensors, as strings, and a safetensors
// input's survives a quantization to GGUF; storage keys are not carried.
func TestQuantizeCarriesMetadataAcrossFormats(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "i8.safetensors")
	run(t, Options{Input: "../testdata/tiny-sd1.gguf", Output: st, Type: "int8_convrot", GroupSize: 16}, pipeline.Options{})
	m := mustOpen(t, st)
	for key, want := range map[string]string{"sdtool.unet.num_heads": "8", "sdtool.clip.hidden_act": "quick_gelu", "general.name": "tiny synthetic sd1"} {
		if v, ok := m.Metadata().String(key); !ok || v != want {
			t.Errorf("int8_convrot output: %s = %q, want %q", key, v, want)
		}
	}
	if _, ok := m.Metadata().String("sdtool.tokenizer.clip.merges"); !ok {
		t.Error("int8_convrot output lost the embedded tokenizer")
	}
	m.Close()
	gg := filepath.Join(dir, "q8.gguf")
	run(t, Options{Input: tinyPath, Output: gg, Type: "Q8_0"}, pipeline.Options{})
	g := mustOpen(t, gg)
	defer g.Close()
	if kv, ok := g.Metadata().Get("sdtool.unet.num_heads"); !ok || kv.Value != "8" {
		t.Errorf("GGUF from safetensors: sdtool.unet.num_heads = %v", kv.Value)
	}
	if _, ok := g.Metadata().Get("format"); ok {
		t.Error("safetensors' format key was carried into the GGUF")
	}
}

// A T5 tokenizer embedded under tokenizer.ggml.* (arrays and numbers)
// survives a quantization to ComfyUI safetensors: the output's tokenizer
// encodes a prompt to the input's ids. Before arrays were carried, the
// output held tokenizer.ggml.model without its tokens and nothing could
// read it (issue 34, item 2).
func TestQuantizeCarriesUnigramTokenizerIntoSafetensors(t *testing.T) {
	const src = "../testdata/tiny-flux.gguf"
	in := mustOpen(t, src)
	want, err := text.UnigramFromMetadata(src, in.Metadata())
	in.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"int8_convrot", "fp8_e4m3"} {
		out := filepath.Join(t.TempDir(), typ+".safetensors")
		res := run(t, Options{Input: src, Output: out, Type: typ, GroupSize: 16, AllowRequantize: true}, pipeline.Options{})
		for _, w := range res.Warnings {
			if strings.Contains(w, "tokenizer.ggml") {
				t.Errorf("%s: warning %q", typ, w)
			}
		}
		m := mustOpen(t, out)
		got, err := text.UnigramFromMetadata(out, m.Metadata())
		m.Close()
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		for _, p := range []string{"a photo of the cat", "", "  an unknown wordz "} {
			if g, w := got.Encode(p), want.Encode(p); !slices.Equal(g, w) {
				t.Errorf("%s: %q encodes to %v, the input's tokenizer to %v", typ, p, g, w)
			}
		}
	}
}

package convert

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/text"
)

// --tokenizer embeds a CLIP tokenizer and a SentencePiece one (both
// formats) so that text reads back the same tokenizers.
func TestConvertEmbedsTokenizers(t *testing.T) {
	dir := t.TempDir()
	merges := filepath.Join(dir, "merges.txt")
	os.WriteFile(merges, []byte("#version: 0.2\nh o\nho use</w>\nu s\nus e</w>\n"), 0o644)
	want, err := text.LoadCLIPTokenizer(merges)
	if err != nil {
		t.Fatal(err)
	}
	spiece := filepath.Join(dir, "spiece.model")
	gz, err := os.Open("../text/testdata/t5/spiece.model.gz")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	gz.Close()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(spiece, raw, 0o644)
	t5, err := text.LoadUnigram(spiece)
	if err != nil {
		t.Fatal(err)
	}

	for _, out := range []string{"a.gguf", "a.safetensors"} {
		toks := []string{merges, spiece}
		path := filepath.Join(dir, out)
		plan, err := run(&Options{Inputs: map[string]string{"model": tinyGGUF}, Output: path, Tokenizers: toks}, pipeline.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(plan.Notes, "\n"), "CLIP BPE tokenizer (4 merges)") {
			t.Errorf("%s: the summary does not say what was embedded: %q", out, plan.Notes)
		}
		m, err := formats.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := text.CLIPTokenizerFromMetadata(path, m.Metadata())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Merges(), want.Merges()) {
			t.Errorf("%s: embedded merges %q, want %q (the input's own tokenizer must be replaced)", out, got.Merges(), want.Merges())
		}
		u, err := text.UnigramFromMetadata(path, m.Metadata())
		if err != nil {
			t.Fatal(err)
		}
		p := "A photo of a cat, highly detailed."
		if a, b := u.Tokenize(p), t5.Tokenize(p); u.VocabSize() != t5.VocabSize() || !reflect.DeepEqual(a, b) {
			t.Errorf("T5 read back with %d pieces, ids %v, want %d and %v", u.VocabSize(), a, t5.VocabSize(), b)
		}
		m.Close()
	}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Output: filepath.Join(dir, "b.gguf"), Tokenizers: []string{filepath.Join(dir, "nope.json")}}, "nope.json"},
		{Options{Output: filepath.Join(dir, "b.gguf"), Tokenizers: []string{tinyGGUF}}, "not a CLIP tokenizer"},
		{Options{Output: filepath.Join(dir, "b.gguf"), Tokenizers: []string{merges}, NoMetadata: true}, "NoMetadata"},
	} {
		c.opts.Inputs = map[string]string{"model": tinyGGUF}
		if _, err := Plan(&c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opts.Tokenizers, err, c.want)
		}
	}
}

// --tokenizer embeds an LLM's byte-level BPE tokenizer.json (Qwen's
// pre-tokenizer recognised by its pattern) under tokenizer.ggml.*, in
// both formats, and text builds the same tokenizer from what was written.
func TestConvertEmbedsByteBPE(t *testing.T) {
	dir := t.TempDir()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r = rune(256 + len(vocab) - countPrintable(b))
		}
		vocab[string(r)] = len(vocab)
	}
	vocab["ca"], vocab["cat"] = len(vocab), len(vocab)+1
	doc := map[string]any{
		"added_tokens":  []any{map[string]any{"id": len(vocab), "content": "<|im_start|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Split", "pattern": map[string]any{"Regex": text.PreQwen2Regex}}}},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"c a", "ca t"}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	tj := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(tj, b, 0o644)
	want, err := text.LoadByteBPETokenizer(tj)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{"q.gguf", "q.safetensors"} {
		path := filepath.Join(dir, out)
		if _, err := run(&Options{Inputs: map[string]string{"model": tinyGGUF}, Output: path, Tokenizers: []string{tj}}, pipeline.Options{}); err != nil {
			t.Fatal(err)
		}
		m, err := formats.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := text.ByteBPEFromMetadata(path, m.Metadata())
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		p := "<|im_start|>a cat"
		if a, b := got.Encode(p), want.Encode(p); !reflect.DeepEqual(a, b) || len(a) != 4 {
			t.Errorf("%s: %v, want %v (4 ids)", out, a, b)
		}
	}
}

// countPrintable counts the bytes below b that GPT-2's alphabet keeps as
// themselves, so that the others are numbered from 256 in byte order.
func countPrintable(b int) int {
	n := 0
	for x := 0; x < b; x++ {
		if x >= '!' && x <= '~' || x >= 0xA1 && x <= 0xAC || x >= 0xAE {
			n++
		}
	}
	return n
}

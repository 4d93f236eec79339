package convert

import (
	"compress/gzip"
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
		{Options{Output: filepath.Join(dir, "b.gguf"), Tokenizers: []string{merges}, NoMetadata: true}, "--no-metadata"},
	} {
		c.opts.Inputs = map[string]string{"model": tinyGGUF}
		if _, err := Plan(&c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opts.Tokenizers, err, c.want)
		}
	}
}

package text

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// A tokenizer embedded with MetadataKV reads back as the same tokenizer
// (same merges, same ids for every prompt), and one whose vocabulary is not
// derived from its merges is refused.
func TestCLIPMetadataKVRoundTrip(t *testing.T) {
	merges := [][2]string{{"c", "a"}, {"ca", "t</w>"}, {"d", "o"}, {"do", "g</w>"}}
	tok, err := NewCLIPTokenizerFromMerges(merges)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Merges(); !reflect.DeepEqual(got, merges) {
		t.Fatalf("Merges() = %q, want %q", got, merges)
	}
	kv, err := tok.MetadataKV()
	if err != nil {
		t.Fatal(err)
	}
	back, err := CLIPTokenizerFromMetadata("test", formats.Metadata{kv})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a cat", "dog cat dog", "a cat, a dog!"} {
		if a, b := tok.Encode(p), back.Encode(p); !reflect.DeepEqual(a, b) {
			t.Errorf("%q: %v embedded, %v original", p, b, a)
		}
	}
	// A vocab.json with shuffled ids: not expressible as merges alone.
	dir := t.TempDir()
	vocab := map[string]int{}
	for s, id := range tok.vocab {
		vocab[s] = int(id)
	}
	a, b := vocab["cat</w>"], vocab["dog</w>"]
	vocab["cat</w>"], vocab["dog</w>"] = b, a
	data, _ := json.Marshal(vocab)
	os.WriteFile(filepath.Join(dir, "vocab.json"), data, 0o644)
	os.WriteFile(filepath.Join(dir, "merges.txt"), []byte("#version: 0.2\nc a\nca t</w>\nd o\ndo g</w>\n"), 0o644)
	odd, err := LoadCLIPTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := odd.MetadataKV(); err == nil {
		t.Error("a vocabulary with other ids was embedded as merges")
	}
}

// CLIP's real merges embed and read back with the standard 49,408 ids.
func TestCLIPMetadataKVRealMerges(t *testing.T) {
	path := filepath.Join("..", "..", "..", "shared", "data", "clip_bpe_merges.txt")
	if _, err := os.Stat(path); err != nil {
		t.Skip("CLIP merges absent (shared/data)")
	}
	tok, err := LoadCLIPTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := tok.MetadataKV()
	if err != nil {
		t.Fatal(err)
	}
	back, err := CLIPTokenizerFromMetadata("test", formats.Metadata{kv})
	if err != nil {
		t.Fatal(err)
	}
	if back.VocabSize() != 49408 || back.EOS() != CLIPEOS {
		t.Errorf("read back %d tokens, EOS %d", back.VocabSize(), back.EOS())
	}
	p := "a photograph of an astronaut riding a horse, highly detailed"
	if a, b := tok.Encode(p), back.Encode(p); !reflect.DeepEqual(a, b) {
		t.Errorf("%v embedded, %v original", b, a)
	}
}

package text

import (
	"slices"
	"strings"
	"testing"
)

// tinyByteBPE is a tokenizer.json of the shape Mistral's and Llama 3's
// take: special tokens added first, then byte-level tokens ("Ġ" is the
// space byte in GPT-2's alphabet).
const tinyByteBPE = `{"added_tokens":[{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}],
"model":{"type":"BPE","vocab":{"<unk>":0,"<s>":1,"</s>":2,"a":3,"b":4,"Ġ":5,"ab":6,"Ġab":7},"merges":[["a","b"],["Ġ","ab"]]}}`

func TestParseByteBPE(t *testing.T) {
	v, err := ParseByteBPE("tiny", []byte(tinyByteBPE))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"<unk>", "<s>", "</s>", "a", "b", "Ġ", "ab", "Ġab"}; !slices.Equal(v.Tokens, want) {
		t.Errorf("tokens %q, want %q", v.Tokens, want)
	}
	if want := []int32{3, 3, 3, 1, 1, 1, 1, 1}; !slices.Equal(v.Types, want) {
		t.Errorf("types %v, want %v", v.Types, want)
	}
	if want := []string{"a b", "Ġ ab"}; !slices.Equal(v.Merges, want) {
		t.Errorf("merges %q, want %q", v.Merges, want)
	}
	md := v.GGUFMetadata()
	if m, _ := md.String(GGUFTokenizerModel); m != "gpt2" {
		t.Errorf("model %q", m)
	}
	for _, c := range []struct{ name, json, want string }{
		{"gap", `{"model":{"type":"BPE","vocab":{"a":0,"b":2}}}`, "no token has id 1"},
		{"not byte-level", `{"model":{"type":"BPE","vocab":{"a":0," b":1}}}`, "outside the byte-level alphabet"},
		{"unigram", `{"model":{"type":"Unigram","vocab":[]}}`, "not a BPE tokenizer"},
		{"clash", `{"added_tokens":[{"id":0,"content":"<s>","special":true}],"model":{"type":"BPE","vocab":{"a":0}}}`, "is both"},
		{"bad merge", `{"model":{"type":"BPE","vocab":{"a":0},"merges":["a"]}}`, "not two symbols"},
		{"negative", `{"model":{"type":"BPE","vocab":{"a":-1,"b":0}}}`, "outside"},
	} {
		if _, err := ParseByteBPE(c.name, []byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func FuzzParseByteBPE(f *testing.F) {
	f.Add([]byte(tinyByteBPE))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseByteBPE("fuzz", b)
		if err != nil {
			return
		}
		if len(v.Tokens) != len(v.Types) || len(v.Tokens) == 0 {
			t.Fatalf("%d tokens, %d types", len(v.Tokens), len(v.Types))
		}
	})
}

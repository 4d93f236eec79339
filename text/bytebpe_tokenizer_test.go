package text

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// qwenTokenizerEnv names the environment variable holding the path of a
// real Qwen2/2.5/3 tokenizer.json (../shared/tools/qwen-tokenizer prints one).
const qwenTokenizerEnv = "SDTOOL_QWEN_TOKENIZER"

// TestSplitQwen2 checks the hand-written split against pieces worked out
// from the pattern's alternatives, one case per alternative and per
// backtracking rule.
func TestSplitQwen2(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"I'm you're IT'S 'x", []string{"I", "'m", " you", "'re", " IT", "'S", " '", "x"}},
		{"abc123", []string{"abc", "1", "2", "3"}},
		{"a, b!! c", []string{"a", ",", " b", "!!", " c"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   ", []string{"a", "   "}},
		{"x\n\n  y", []string{"x", "\n\n", " ", " y"}},
		{"x \n \ty", []string{"x", " \n", " ", "\ty"}},
		{"end.\n\nnext", []string{"end", ".\n\n", "next"}},
		{"你好，世界", []string{"你好", "，世界"}},
		{"🙂🙂 ok", []string{"🙂🙂", " ok"}},
		{"$5", []string{"$", "5"}},
		{"\r\n", []string{"\r\n"}},
		{" ", []string{" "}},
	} {
		if got := splitQwen2(c.in); !slices.Equal(got, c.want) {
			t.Errorf("splitQwen2(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// tinyQwen is a small byte-level vocabulary with Qwen's pre-tokenizer:
// all 256 byte symbols, a few merges and two control tokens.
func tinyQwen(t testing.TB) *ByteBPEVocab {
	t.Helper()
	order, runes := bytesToUnicode()
	v := &ByteBPEVocab{Pre: PreQwen2}
	for _, b := range order {
		v.Tokens = append(v.Tokens, string(runes[b]))
	}
	for _, m := range [][2]string{{"a", "b"}, {"Ġ", "ab"}, {"ab", "c"}, {"Ġab", "c"}} {
		v.Merges = append(v.Merges, m[0]+" "+m[1])
		v.Tokens = append(v.Tokens, m[0]+m[1])
	}
	v.Tokens = append(v.Tokens, "<|im_start|>", "<|im_end|>")
	v.Types = make([]int32, len(v.Tokens))
	for i := range v.Types {
		v.Types[i] = TokenNormal
	}
	v.Types[len(v.Types)-2], v.Types[len(v.Types)-1] = TokenControl, TokenControl
	return v
}

func TestByteBPEEncodeTiny(t *testing.T) {
	v := tinyQwen(t)
	tok, err := NewByteBPETokenizer("tiny", v)
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) int32 {
		i, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	got := tok.Encode("<|im_start|>abc abc ab<|im_end|>x")
	want := []int32{id("<|im_start|>"), id("abc"), id("Ġabc"), id("Ġab"), id("<|im_end|>"), id("x")}
	if !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	// Through GGUF metadata and back: the same ids.
	tok2, err := ByteBPEFromMetadata("md", v.GGUFMetadata())
	if err != nil {
		t.Fatal(err)
	}
	if got2 := tok2.Encode("<|im_start|>abc abc ab<|im_end|>x"); !slices.Equal(got2, want) {
		t.Errorf("from metadata: %v, want %v", got2, want)
	}
	if _, err := ByteBPEFromMetadata("md", formats.Metadata{{Key: GGUFTokenizerModel, Type: formats.TypeString, Value: "t5"}}); err == nil || !strings.Contains(err.Error(), ErrNoByteBPETokenizer.Error()) {
		t.Errorf("unigram metadata: %v", err)
	}
	bad := *v
	bad.Pre = "llama3"
	if _, err := NewByteBPETokenizer("x", &bad); err == nil || !strings.Contains(err.Error(), "pre-tokenizer") {
		t.Errorf("unknown pre-tokenizer: %v", err)
	}
	bad = *v
	bad.Merges = append(slices.Clone(v.Merges), "zz q")
	if _, err := NewByteBPETokenizer("x", &bad); err == nil || !strings.Contains(err.Error(), "merge 5") {
		t.Errorf("merge outside the vocabulary: %v", err)
	}
}

// TestByteBPEVocabMergesFolder writes the tiny vocabulary as vocab.json,
// merges.txt and tokenizer_config.json and checks that the folder loads to
// the same tokenizer.
func TestByteBPEVocabMergesFolder(t *testing.T) {
	v := tinyQwen(t)
	dir := t.TempDir()
	vocab := map[string]int{}
	added := map[string]any{}
	for i, s := range v.Tokens {
		if v.Types[i] == TokenControl {
			added[itoa(i)] = map[string]any{"content": s, "special": true}
			continue
		}
		vocab[s] = i
	}
	write := func(name string, x any) {
		b, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("vocab.json", vocab)
	write("tokenizer_config.json", map[string]any{"added_tokens_decoder": added})
	if err := os.WriteFile(filepath.Join(dir, "merges.txt"), []byte("#version: 0.2\n"+strings.Join(v.Merges, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "vocab.json")} {
		tok, err := LoadByteBPETokenizer(p)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := NewByteBPETokenizer("tiny", v)
		in := "<|im_start|>abc ab<|im_end|>"
		if g, w := tok.Encode(in), want.Encode(in); !slices.Equal(g, w) {
			t.Errorf("%s: %v, want %v", p, g, w)
		}
	}
	if _, err := LoadByteBPETokenizer(t.TempDir()); err == nil {
		t.Error("an empty folder loaded")
	}
}

// TestQwenTokenizerReal encodes the committed prompts with the real Qwen
// tokenizer.json and compares with the ids an independent tokenizer gave
// (testdata/qwen/ids.json, written by gen.js with transformers.js).
func TestQwenTokenizerReal(t *testing.T) {
	path := os.Getenv(qwenTokenizerEnv)
	if path == "" {
		t.Skipf("set %s to Qwen's tokenizer.json (../shared/tools/qwen-tokenizer prints one)", qwenTokenizerEnv)
	}
	tok, err := LoadByteBPETokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/qwen/ids.json")
	if err != nil {
		t.Fatal(err)
	}
	var table []struct {
		Prompt string  `json:"prompt"`
		IDs    []int32 `json:"ids"`
	}
	if err := json.Unmarshal(b, &table); err != nil {
		t.Fatal(err)
	}
	if len(table) < 10 {
		t.Fatalf("%d prompts in the table", len(table))
	}
	for _, c := range table {
		if got := tok.Encode(c.Prompt); !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", c.Prompt, got, c.IDs)
		}
	}
}

func FuzzSplitQwen2(f *testing.F) {
	for _, s := range []string{"Hello world", "a  b\n\n c", "I'm 你好 123 🙂", " \t\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got := strings.Join(splitQwen2(s), ""); got != string([]rune(s)) {
			t.Fatalf("pieces of %q join to %q", s, got)
		}
	})
}

func FuzzByteBPEFromMetadata(f *testing.F) {
	f.Add([]byte(tinyByteBPE))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseByteBPE("fuzz", b)
		if err != nil {
			return
		}
		v.Pre = PreQwen2
		tok, err := ByteBPEFromMetadata("fuzz", v.GGUFMetadata())
		if err != nil {
			return
		}
		for _, id := range tok.Encode("ab <|x|> ab") {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("id %d outside %d tokens", id, tok.VocabSize())
			}
		}
	})
}

// BenchmarkQwenEncode encodes a long mixed prompt with the real Qwen
// tokenizer (SDTOOL_QWEN_TOKENIZER), the per-piece cache cleared each time.
func BenchmarkQwenEncode(b *testing.B) {
	path := os.Getenv(qwenTokenizerEnv)
	if path == "" {
		b.Skipf("set %s to Qwen's tokenizer.json", qwenTokenizerEnv)
	}
	tok, err := LoadByteBPETokenizer(path)
	if err != nil {
		b.Fatal(err)
	}
	prompt := strings.Repeat("A lovely cat sitting on a wooden table, golden hour, 8k; 一只可爱的小猫坐在木桌上。 🙂 ", 20)
	b.SetBytes(int64(len(prompt)))
	for b.Loop() {
		tok.mu.Lock()
		clear(tok.cache)
		tok.mu.Unlock()
		tok.Encode(prompt)
	}
}

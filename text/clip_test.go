package text

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// sharedMerges is CLIP's merges file in the shared data folder beside the repository.
const sharedMerges = "../../shared/data/clip_bpe_merges.txt"

// tinyMerges is a hand-made merges list: ids follow CLIP's rule, so "of</w>" is 512, "ca" 513,
// "cat</w>" 514, "ph" 515, "ot" 516, "phot" 517, "photo</w>" 518, BOS 519 and EOS 520.
const tinyMerges = "#version: 0.2\no f</w>\nc a\nca t</w>\np h\no t\nph ot\nphot o</w>\n"

func tinyTokenizer(t testing.TB) *CLIPTokenizer {
	t.Helper()
	m, err := ParseMerges("tiny", tinyMerges)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := NewCLIPTokenizerFromMerges(m)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func realTokenizer(t testing.TB) *CLIPTokenizer {
	t.Helper()
	if _, err := os.Stat(sharedMerges); err != nil {
		t.Skipf("CLIP merges not present: %v", err)
	}
	tok, err := LoadCLIPTokenizer(sharedMerges)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestBytesToUnicode(t *testing.T) {
	order, runes := bytesToUnicode()
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		if seen[runes[b]] {
			t.Fatalf("rune %U used twice", runes[b])
		}
		seen[runes[b]] = true
	}
	// CLIP's order: '!' first, 'ÿ' is the last printable (index 187), then byte 0 mapped to U+0100.
	if order[0] != '!' || order[187] != 0xFF || order[188] != 0 || runes[0] != 0x100 || runes[' '] != 0x120 {
		t.Fatalf("order[0]=%d order[187]=%d order[188]=%d runes[0]=%U runes[' ']=%U", order[0], order[187], order[188], runes[0], runes[' '])
	}
}

func TestTinyVocabulary(t *testing.T) {
	tok := tinyTokenizer(t)
	if tok.BOS() != 519 || tok.EOS() != 520 || tok.VocabSize() != 521 {
		t.Fatalf("BOS %d EOS %d size %d", tok.BOS(), tok.EOS(), tok.VocabSize())
	}
	for s, want := range map[string]int{"!": 0, "a": 64, "a</w>": 320, "of</w>": 512, "photo</w>": 518, "\u0100": 188} {
		if id, ok := tok.ID(s); !ok || id != want {
			t.Errorf("ID(%q) = %d, %v; want %d", s, id, ok, want)
		}
		if got := tok.Token(want); got != s {
			t.Errorf("Token(%d) = %q, want %q", want, got, s)
		}
	}
}

func TestEncodeTiny(t *testing.T) {
	tok := tinyTokenizer(t)
	cases := []struct {
		text string
		want []int
	}{
		{"a photo of a cat", []int{320, 518, 512, 320, 514}},
		{"  A\tPHOTO \n\n of a CAT  ", []int{320, 518, 512, 320, 514}},
		{"", nil},
		{"   ", nil},
		{"cat!!", []int{514, 0, 256}},     // "cat</w>" then "!" "!</w>"
		{"12", []int{16 + 256, 17 + 256}}, // digits are split one by one
		{"it's", []int{'i' - '!', 't' - '!' + 256, '\'' - '!', 's' - '!' + 256}},
		{"é", []int{127, 358}},     // bytes C3 A9, both printable Latin-1
		{"\x01", []int{189 + 256}}, // a control byte maps above U+0100
		{"a<|endoftext|>cat", []int{320, 520, 514}},
		{"<|startoftext|>", []int{519}},
		{"cats", []int{513, 't' - '!', 's' - '!' + 256}}, // (ca, t) has no merge: only (ca, t</w>) does
	}
	for _, c := range cases {
		got := tok.Encode(c.text)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

func TestBPEMergeOrder(t *testing.T) {
	// With "a t</w>" ranked before "c a", "cat" must become c + at</w> and never reach ca.
	tok, err := NewCLIPTokenizerFromMerges([][2]string{{"a", "t</w>"}, {"c", "a"}, {"ca", "t</w>"}})
	if err != nil {
		t.Fatal(err)
	}
	at, _ := tok.ID("at</w>")
	if got, want := tok.Encode("cat"), []int{'c' - '!', at}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Encode(cat) = %v, want %v", got, want)
	}
	// Every occurrence of the best pair merges, left to right without overlap.
	tok, err = NewCLIPTokenizerFromMerges([][2]string{{"a", "a"}})
	if err != nil {
		t.Fatal(err)
	}
	aa, _ := tok.ID("aa")
	if got, want := tok.Encode("aaaa"), []int{aa, 'a' - '!', 'a' - '!' + 256}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Encode(aaaa) = %v, want %v", got, want)
	}
}

func TestEncodePadded(t *testing.T) {
	tok := tinyTokenizer(t)
	cases := []struct {
		text          string
		maxLen, padID int
		want          []int
	}{
		{"a cat", 8, 0, []int{519, 320, 514, 520, 0, 0, 0, 0}},
		{"a cat", 6, 520, []int{519, 320, 514, 520, 520, 520}},
		{"a photo of a cat", 4, 0, []int{519, 320, 518, 520}}, // truncated, EOS kept
		{"a photo of a cat", 7, 0, []int{519, 320, 518, 512, 320, 514, 520}},
		{"a photo of a cat", 0, 0, []int{519, 320, 518, 512, 320, 514, 520}},
		{"", 3, 7, []int{519, 520, 7}},
		{"a cat", 1, 0, []int{519, 520}},
	}
	for _, c := range cases {
		if got := tok.EncodePadded(c.text, c.maxLen, c.padID); !reflect.DeepEqual(got, c.want) {
			t.Errorf("EncodePadded(%q, %d, %d) = %v, want %v", c.text, c.maxLen, c.padID, got, c.want)
		}
	}
}

func TestDecode(t *testing.T) {
	tok := tinyTokenizer(t)
	// Decode puts a space after every end-of-word symbol, so digits and punctuation come back spaced.
	for s, want := range map[string]string{"a photo of a cat": "a photo of a cat", "Cat!!": "cat !!", "é and 12": "é and 1 2"} {
		if got := tok.Decode(tok.EncodePadded(s, 20, SD1PadID)); got != want {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	}
}

func TestParseMergesErrors(t *testing.T) {
	for _, text := range []string{"", "#version: 0.2\n", "a b c\n", "ab\n", " b\n", "a  b\n"} {
		if _, err := ParseMerges("m", text); !errors.Is(err, ErrTokenizer) {
			t.Errorf("ParseMerges(%q): err = %v, want ErrTokenizer", text, err)
		}
	}
	m, err := ParseMerges("m", "#version: 0.2\r\na b\r\n\r\nab c</w>")
	if err != nil || len(m) != 2 || m[1] != [2]string{"ab", "c</w>"} {
		t.Fatalf("ParseMerges = %v, %v", m, err)
	}
}

func TestNewTokenizerErrors(t *testing.T) {
	good := map[string]int{}
	tok := tinyTokenizer(t)
	for id := 0; id < tok.VocabSize(); id++ {
		good[tok.Token(id)] = id
	}
	merges, _ := ParseMerges("tiny", tinyMerges)
	if _, err := NewCLIPTokenizer(good, merges); err != nil {
		t.Fatalf("round trip of the tiny vocabulary: %v", err)
	}
	drop := func(k string) map[string]int {
		v := map[string]int{}
		for s, id := range good {
			if s != k {
				v[s] = id
			}
		}
		return v
	}
	for _, k := range []string{"a", "a</w>", bosText, eosText, "cat</w>"} {
		if _, err := NewCLIPTokenizer(drop(k), merges); !errors.Is(err, ErrTokenizer) || !strings.Contains(err.Error(), k) {
			t.Errorf("without %q: err = %v", k, err)
		}
	}
	if _, err := NewCLIPTokenizerFromMerges([][2]string{{"a", "b"}, {"a", "b"}}); !errors.Is(err, ErrTokenizer) {
		t.Errorf("repeated merge: err = %v", err)
	}
	bad := drop("zz")
	bad["x"] = -3
	if _, err := NewCLIPTokenizer(bad, merges); !errors.Is(err, ErrTokenizer) {
		t.Errorf("negative id: err = %v", err)
	}
}

func TestLoadTokenizerFiles(t *testing.T) {
	tok := tinyTokenizer(t)
	dir := t.TempDir()
	var vocab strings.Builder
	vocab.WriteString("{")
	for id := 0; id < tok.VocabSize(); id++ {
		if id > 0 {
			vocab.WriteString(",")
		}
		vocab.WriteString(quoteJSON(tok.Token(id)) + ":" + itoa(id))
	}
	vocab.WriteString("}")
	merges, _ := ParseMerges("tiny", tinyMerges)
	var mergeStrings, mergePairs []string
	for _, m := range merges {
		mergeStrings = append(mergeStrings, quoteJSON(m[0]+" "+m[1]))
		mergePairs = append(mergePairs, "["+quoteJSON(m[0])+","+quoteJSON(m[1])+"]")
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hfOld := `{"added_tokens":[],"model":{"type":"BPE","end_of_word_suffix":"</w>","vocab":` + vocab.String() +
		`,"merges":[` + strings.Join(mergeStrings, ",") + `]}}`
	hfNew := `{"model":{"type":"BPE","vocab":` + vocab.String() + `,"merges":[` + strings.Join(mergePairs, ",") + `]}}`
	paths := []string{
		write("hf/tokenizer.json", hfOld),
		write("hf2/tok.json", hfNew),
		filepath.Join(dir, "hf"),
		write("split/vocab.json", vocab.String()),
		write("bare/merges.txt", tinyMerges),
		filepath.Join(dir, "split"),
	}
	write("split/merges.txt", tinyMerges)
	write("diffusers/tokenizer/tokenizer.json", hfOld)
	paths = append(paths, filepath.Join(dir, "diffusers"))
	paths = append(paths[:3], paths[4:]...) // split/vocab.json alone is not a tokenizer; the folder is
	for _, p := range paths {
		got, err := LoadCLIPTokenizer(p)
		if err != nil {
			t.Errorf("LoadCLIPTokenizer(%s): %v", p, err)
			continue
		}
		if ids := got.EncodePadded("a photo of a cat", 0, 0); !reflect.DeepEqual(ids, []int{519, 320, 518, 512, 320, 514, 520}) {
			t.Errorf("LoadCLIPTokenizer(%s): ids %v", p, ids)
		}
	}
	for name, content := range map[string]string{
		"bad/a.json": `{"model":{"type":"Unigram","vocab":{"a":1},"merges":["a b"]}}`,
		"bad/b.json": `{"model":{"type":"BPE","vocab":{},"merges":["a b"]}}`,
		"bad/c.json": `{"model":{"type":"BPE","vocab":{"a":0},"merges":[1,2]}}`,
		"bad/d.json": `not json`,
		"bad/e.json": `{"model":{"type":"BPE","end_of_word_suffix":"@@","vocab":{"a":0},"merges":["a b"]}}`,
		"bad/f.txt":  "a b c d\n",
	} {
		p := write(name, content)
		if _, err := LoadCLIPTokenizer(p); !errors.Is(err, ErrTokenizer) || !strings.Contains(err.Error(), p) {
			t.Errorf("LoadCLIPTokenizer(%s): err = %v, want ErrTokenizer naming the file", name, err)
		}
	}
	if _, err := LoadCLIPTokenizer(filepath.Join(dir, "bad")); !errors.Is(err, ErrTokenizer) {
		t.Errorf("folder without a tokenizer: err = %v", err)
	}
	if _, err := LoadCLIPTokenizer(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestTokenizerFromMetadata(t *testing.T) {
	md := formats.Metadata{{Key: "general.architecture", Type: formats.ValueType(8), Value: "sd1"}}
	if _, err := CLIPTokenizerFromMetadata("m.gguf", md); !errors.Is(err, ErrNoTokenizer) {
		t.Fatalf("absent key: err = %v", err)
	}
	withString := append(md, formats.KV{Key: CLIPMergesKey, Type: formats.ValueType(8), Value: tinyMerges})
	lines := strings.Split(strings.TrimSpace(tinyMerges), "\n")
	withArray := append(md, formats.KV{Key: CLIPMergesKey, Type: formats.ValueType(9), Value: formats.Array{Elem: formats.ValueType(8), Values: lines}})
	for _, m := range []formats.Metadata{withString, withArray} {
		tok, err := CLIPTokenizerFromMetadata("m.gguf", m)
		if err != nil {
			t.Fatal(err)
		}
		if ids := tok.Encode("a photo of a cat"); !reflect.DeepEqual(ids, []int{320, 518, 512, 320, 514}) {
			t.Fatalf("ids %v", ids)
		}
	}
	bad := append(md, formats.KV{Key: CLIPMergesKey, Type: formats.ValueType(4), Value: uint32(3)})
	if _, err := CLIPTokenizerFromMetadata("m.gguf", bad); !errors.Is(err, ErrTokenizer) || !strings.Contains(err.Error(), "m.gguf") {
		t.Fatalf("wrong type: err = %v", err)
	}
}

func TestRealCLIPIDs(t *testing.T) {
	tok := realTokenizer(t)
	if tok.BOS() != CLIPBOS || tok.EOS() != CLIPEOS || tok.VocabSize() != 49408 {
		t.Fatalf("BOS %d EOS %d size %d", tok.BOS(), tok.EOS(), tok.VocabSize())
	}
	want := []int{49406, 320, 1125, 539, 320, 2368, 49407}
	if got := tok.EncodePadded("a photo of a cat", 0, 0); !reflect.DeepEqual(got, want) {
		t.Fatalf("a photo of a cat: %v, want %v", got, want)
	}
	// The ids Hugging Face's documentation shows for the classic diffusers prompt.
	astronaut := []int{49406, 320, 8853, 539, 550, 18376, 6765, 320, 4558, 49407}
	if got := tok.EncodePadded("a photograph of an astronaut riding a horse", 0, 0); !reflect.DeepEqual(got, astronaut) {
		t.Fatalf("astronaut: %v, want %v", got, astronaut)
	}
	sd1 := tok.EncodePadded("a photo of a cat", CLIPMaxLength, SD1PadID)
	sd2 := tok.EncodePadded("a photo of a cat", CLIPMaxLength, SD2PadID)
	if len(sd1) != 77 || len(sd2) != 77 || sd1[76] != 49407 || sd2[76] != 0 || sd2[6] != 49407 || !reflect.DeepEqual(sd1[:7], want) {
		t.Fatalf("padding: sd1 %v sd2 %v", sd1, sd2)
	}
	long := tok.EncodePadded(strings.Repeat("cat ", 100), CLIPMaxLength, SD1PadID)
	if len(long) != 77 || long[0] != 49406 || long[75] != 2368 || long[76] != 49407 {
		t.Fatalf("truncation: %v", long)
	}
	if got := tok.Decode(tok.Encode("A Photo of a CAT, 4k!")); got != "a photo of a cat , 4 k !" {
		t.Errorf("decode: %q", got)
	}
}

func TestTokenizerConcurrent(t *testing.T) {
	tok := tinyTokenizer(t)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if got := tok.Encode("a photo of a cat"); len(got) != 5 {
					t.Errorf("len %d", len(got))
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestBPECacheBounded(t *testing.T) {
	tok := tinyTokenizer(t)
	for i := 0; i < maxCachedWords+10; i++ {
		tok.Encode("w" + itoa(i) + "x")
	}
	if n := len(tok.cache); n > maxCachedWords {
		t.Fatalf("cache holds %d words", n)
	}
}

func quoteJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var buf [20]byte
	n := len(buf)
	for i > 0 {
		n--
		buf[n] = byte('0' + i%10)
		i /= 10
	}
	return string(buf[n:])
}

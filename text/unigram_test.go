package text

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// t5SpieceGz is T5's spiece.model (google-t5/t5-base, google/t5-v1_1-xxl and the flan-t5 models share it:
// 791,656 bytes, SHA-256 d60acb128cf7b7f2536e8f38a5b18a05535c9e14c7a355904270e15b0945ea86), gzip-compressed.
const t5SpieceGz = "testdata/t5/spiece.model.gz"

var (
	t5Once sync.Once
	t5Data []byte
	t5Tok  *UnigramTokenizer
	t5Err  error
)

// t5SpieceBytes returns the uncompressed T5 spiece.model.
func t5SpieceBytes(t testing.TB) []byte {
	t.Helper()
	t5Load()
	if t5Err != nil {
		t.Fatal(t5Err)
	}
	return t5Data
}

// t5Tokenizer returns the real T5 tokenizer, parsed once.
func t5Tokenizer(t testing.TB) *UnigramTokenizer {
	t.Helper()
	t5Load()
	if t5Err != nil {
		t.Fatal(t5Err)
	}
	return t5Tok
}

func t5Load() {
	t5Once.Do(func() {
		f, err := os.Open(t5SpieceGz)
		if err != nil {
			t5Err = err
			return
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			t5Err = err
			return
		}
		t5Data, t5Err = io.ReadAll(zr)
		if t5Err != nil {
			return
		}
		t5Tok, t5Err = ParseSentencePieceModel(t5SpieceGz, t5Data)
	})
}

// publishedRow is one line of testdata/t5/published_ids.jsonl: ids somebody else published for a text
// (see testdata/t5/README.md for where each source is).
type publishedRow struct {
	Source  string   `json:"source"`
	Name    string   `json:"name"`
	Text    string   `json:"text"`
	IDs     *[]int32 `json:"ids"`
	EOS     bool     `json:"eos"`
	Pieces  []string `json:"pieces"`
	Options []string `json:"options"`
}

func readPublishedRows(t *testing.T, path string) []publishedRow {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []publishedRow
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r publishedRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no rows", path)
	}
	return rows
}

// withOptions returns tok changed as a row's options say ("no_dummy_prefix": the tokenizer that
// transformers builds with add_prefix_space=False / legacy=False, which turns off the dummy prefix).
func withOptions(t *testing.T, tok *UnigramTokenizer, opts []string) *UnigramTokenizer {
	t.Helper()
	if len(opts) == 0 {
		return tok
	}
	spec := tok.Spec()
	for _, o := range opts {
		switch o {
		case "no_dummy_prefix":
			spec.AddDummyPrefix = false
		default:
			t.Fatalf("unknown row option %q", o)
		}
	}
	out, err := NewUnigramTokenizer(spec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkPublishedRows runs every row of the published table through tok.
func checkPublishedRows(t *testing.T, tok *UnigramTokenizer, rows []publishedRow) {
	t.Helper()
	for _, r := range rows {
		tk := withOptions(t, tok, r.Options)
		ids, pieces := tk.Segment(r.Text)
		if r.IDs != nil {
			got := ids
			if r.EOS {
				got = tk.Encode(r.Text)
			}
			if !slices.Equal(got, *r.IDs) {
				t.Errorf("%s %s: %q\n got %v\nwant %v (pieces %q)", r.Source, r.Name, r.Text, got, *r.IDs, pieces)
			}
		}
		if r.Pieces != nil && !slices.Equal(pieces, r.Pieces) {
			t.Errorf("%s %s: %q: pieces %q, want %q", r.Source, r.Name, r.Text, pieces, r.Pieces)
		}
	}
}

func TestUnigramT5PublishedIDs(t *testing.T) {
	tok := t5Tokenizer(t)
	checkPublishedRows(t, tok, readPublishedRows(t, "testdata/t5/published_ids.jsonl"))
}

func TestUnigramT5Model(t *testing.T) {
	tok := t5Tokenizer(t)
	spec := tok.Spec()
	if tok.VocabSize() != 32000 {
		t.Errorf("vocabulary of %d pieces, want 32000", tok.VocabSize())
	}
	if tok.PadID() != 0 || tok.EOSID() != 1 || tok.UnkID() != 2 || tok.BOSID() != -1 {
		t.Errorf("pad %d eos %d unk %d bos %d, want 0 1 2 -1", tok.PadID(), tok.EOSID(), tok.UnkID(), tok.BOSID())
	}
	if !spec.AddEOS || spec.AddBOS || !spec.AddDummyPrefix || !spec.RemoveExtraWhitespaces || !spec.EscapeWhitespaces ||
		spec.TreatWhitespaceAsSuffix || spec.ByteFallback {
		t.Errorf("flags %+v differ from T5's", spec)
	}
	if len(spec.PrecompiledCharsMap) == 0 {
		t.Error("no precompiled charsmap")
	}
	if got := tok.Piece(3); got != spmSpace {
		t.Errorf("piece 3 is %q, want ▁", got)
	}
	if got := tok.Piece(32000); got != "" {
		t.Errorf("piece 32000 is %q, want none", got)
	}
}

// TestUnigramT5Normalization checks nmt_nfkc rules through T5's own charsmap: NFKC compatibility forms
// (full-width letters, ligatures, circled digits, ellipsis), whitespace variants mapped to a space,
// ▁ in the input treated as a space, and invalid UTF-8 turned into U+FFFD.
func TestUnigramT5Normalization(t *testing.T) {
	tok := t5Tokenizer(t)
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"   ", ""},
		{"a", "▁a"},
		{"  a  b  ", "▁a▁b"},
		{"ＡＢＣ１２３", "▁ABC123"},
		{"ﬁne ﬂow", "▁fine▁flow"},
		{"①②", "▁12"},
		{"you…", "▁you..."},
		{"a\u00a0b\u3000c\td\ne", "▁a▁b▁c▁d▁e"},
		{"▁a ▁b", "▁a▁b"},
		{"e\u0301", "▁é"},
		{"x\xffy", "▁x\uFFFDy"},
	} {
		if got := tok.Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestUnigramAgainstSPMEncode compares with SentencePiece itself when its command-line encoder is
// installed (Debian's sentencepiece package): random lines built from a pool of tricky characters and
// words, encoded by spm_encode in one run.
func TestUnigramAgainstSPMEncode(t *testing.T) {
	spmEncode := lookPath("spm_encode")
	if spmEncode == "" {
		t.Skip("spm_encode not installed (apt-get install sentencepiece)")
	}
	tok := t5Tokenizer(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "spiece.model")
	if err := os.WriteFile(model, t5SpieceBytes(t), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := spmTestLines(3000)
	got, err := runSPMEncode(spmEncode, model, lines)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, line := range lines {
		if want := tok.Tokenize(line); !slices.Equal(got[i], want) {
			bad++
			if bad <= 10 {
				t.Errorf("line %d %q: spm_encode %v, sdtool %v", i, line, got[i], want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d lines differ", bad, len(lines))
	}
}

func TestUnigramConcurrent(t *testing.T) {
	tok := t5Tokenizer(t)
	want := tok.Encode("A long paragraph for summarization.")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if got := tok.Encode("A long paragraph for summarization."); !slices.Equal(got, want) {
					t.Errorf("concurrent Encode gave %v, want %v", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

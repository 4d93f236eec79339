package text

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// tinySpec is a six-piece vocabulary with T5's conventions: <unk> 0, </s> 1 appended, dummy prefix,
// whitespace collapsed and escaped.
func tinySpec() UnigramSpec {
	return UnigramSpec{
		Pieces: []UnigramPiece{
			{"<unk>", 0, PieceUnknown}, {"</s>", 0, PieceControl}, {"▁", -1, PieceNormal},
			{"a", -2, PieceNormal}, {"b", -2, PieceNormal}, {"▁ab", -1.5, PieceNormal},
		},
		UnkID: 0, BOSID: -1, EOSID: 1, PadID: -1, AddEOS: true,
		AddDummyPrefix: true, RemoveExtraWhitespaces: true, EscapeWhitespaces: true,
	}
}

func mustTokenizer(t *testing.T, spec UnigramSpec) *UnigramTokenizer {
	t.Helper()
	tok, err := NewUnigramTokenizer(spec)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestUnigramTinyEncode(t *testing.T) {
	tok := mustTokenizer(t, tinySpec())
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"", []int32{1}},
		{"   ", []int32{1}},
		{"ab", []int32{5, 1}},
		{"  ab   ab ", []int32{5, 5, 1}},
		{"ba", []int32{2, 4, 3, 1}},
		{"c", []int32{2, 0, 1}},
		{"ccc", []int32{2, 0, 1}},            // consecutive unknowns merge into one <unk>
		{"c c", []int32{2, 0, 2, 0, 1}},      // a known piece between them keeps them apart
		{"\xff", []int32{2, 0, 1}},           // invalid UTF-8 becomes U+FFFD, unknown here
		{"</s>", []int32{2, 0, 1}},           // control pieces are never matched in text
		{"a\u00a0b", []int32{2, 3, 0, 4, 1}}, // no charsmap: NBSP is not a space
	} {
		if got := tok.Encode(c.text); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

func TestUnigramWhitespaceRules(t *testing.T) {
	for _, c := range []struct {
		name                                 string
		prefix, remove, escape, suffix, want string
		in                                   string
	}{
		{name: "t5", prefix: "y", remove: "y", escape: "y", in: "  a  b ", want: "▁a▁b"},
		{name: "no prefix", remove: "y", escape: "y", in: "  a  b ", want: "a▁b"},
		{name: "keep spaces", prefix: "y", escape: "y", in: " a  b", want: "▁▁a▁▁b"},
		{name: "no escape", prefix: "y", remove: "y", in: " a  b ", want: " a b"},
		{name: "suffix", prefix: "y", remove: "y", escape: "y", suffix: "y", in: " a b ", want: "a▁b▁"},
		{name: "only spaces", prefix: "y", remove: "y", escape: "y", in: "   ", want: ""},
		{name: "only spaces kept", prefix: "y", escape: "y", in: "  ", want: "▁▁▁"},
	} {
		spec := tinySpec()
		spec.AddDummyPrefix, spec.RemoveExtraWhitespaces = c.prefix != "", c.remove != ""
		spec.EscapeWhitespaces, spec.TreatWhitespaceAsSuffix = c.escape != "", c.suffix != ""
		if got := mustTokenizer(t, spec).Normalize(c.in); got != c.want {
			t.Errorf("%s: Normalize(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

func TestUnigramByteFallback(t *testing.T) {
	spec := tinySpec()
	spec.ByteFallback = true
	for b := range 256 {
		spec.Pieces = append(spec.Pieces, UnigramPiece{Text: fmt.Sprintf("<0x%02X>", b), Type: PieceByte})
	}
	tok := mustTokenizer(t, spec)
	// "é" is C3 A9; each unknown character is spelled separately, with no merging.
	ids, pieces := tok.Segment("aé€")
	want := []int32{2, 3, 6 + 0xC3, 6 + 0xA9, 6 + 0xE2, 6 + 0x82, 6 + 0xAC}
	if !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v", ids, want)
	}
	if wantP := []string{"▁", "a", "<0xC3>", "<0xA9>", "<0xE2>", "<0x82>", "<0xAC>"}; !slices.Equal(pieces, wantP) {
		t.Errorf("pieces %q, want %q", pieces, wantP)
	}
	spec.Pieces = spec.Pieces[:len(spec.Pieces)-1]
	if _, err := NewUnigramTokenizer(spec); err == nil || !strings.Contains(err.Error(), "255 of the 256 byte pieces") {
		t.Errorf("missing byte piece: %v", err)
	}
}

func TestUnigramUserDefinedAndUnused(t *testing.T) {
	spec := tinySpec()
	spec.Pieces = append(spec.Pieces,
		UnigramPiece{"<sep>", -50, PieceUserDefined}, // cut out whatever its score
		UnigramPiece{"▁abab", 5, PieceUnused},        // never produced, however good its score
		UnigramPiece{"<sep>x", -50, PieceUserDefined},
	)
	tok := mustTokenizer(t, spec)
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"abab", []int32{5, 3, 4, 1}},
		{"ab<sep>ab", []int32{5, 6, 3, 4, 1}},
		{"<sep>x", []int32{2, 8, 1}},
		{"<sep>", []int32{2, 6, 1}},
	} {
		if got := tok.Encode(c.text); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

// TestUnigramViterbiOptimal checks, on random small vocabularies and texts, that the segmentation's score
// equals the best score found by trying every segmentation, and that it covers the text.
func TestUnigramViterbiOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "c", "é", "▁"}
	for trial := range 300 {
		spec := UnigramSpec{Pieces: []UnigramPiece{{"<unk>", 0, PieceUnknown}}, BOSID: -1, EOSID: -1, PadID: -1}
		seen := map[string]bool{}
		for len(spec.Pieces) < 12 {
			var b strings.Builder
			for range rng.IntN(3) + 1 {
				b.WriteString(alphabet[rng.IntN(len(alphabet)-1)])
			}
			if !seen[b.String()] {
				seen[b.String()] = true
				spec.Pieces = append(spec.Pieces, UnigramPiece{b.String(), -float32(rng.IntN(40)) / 4, PieceNormal})
			}
		}
		tok := mustTokenizer(t, spec)
		var text strings.Builder
		for range rng.IntN(8) + 1 {
			text.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		norm := text.String()
		ids, pieces := tok.segment(norm)
		if strings.Join(pieces, "") != norm {
			t.Fatalf("trial %d: pieces %q do not cover %q", trial, pieces, norm)
		}
		got := 0.0
		prevUnk := false
		for i, id := range ids {
			if id == 0 {
				// A merged unknown run scores one penalty per character.
				got += float64(tok.unkScore) * float64(len([]rune(pieces[i])))
			} else {
				got += float64(spec.Pieces[id].Score)
			}
			if id == 0 && prevUnk {
				t.Fatalf("trial %d: unknown pieces not merged: %v", trial, ids)
			}
			prevUnk = id == 0
		}
		if best := bruteBest(tok, norm); math.Abs(got-best) > 1e-3 {
			t.Errorf("trial %d: %q segmented as %q scoring %g, but %g is possible", trial, norm, pieces, got, best)
		}
	}
}

// bruteBest returns the best total score over all segmentations of s into pieces and single unknown
// characters (an unknown character is allowed only where no one-character piece exists, as in SentencePiece).
func bruteBest(tok *UnigramTokenizer, s string) float64 {
	if s == "" {
		return 0
	}
	best := math.Inf(-1)
	_, size := firstRune(s)
	single := false
	for _, p := range tok.spec.Pieces {
		if p.Type == PieceNormal && strings.HasPrefix(s, p.Text) {
			if len(p.Text) == size {
				single = true
			}
			best = max(best, float64(p.Score)+bruteBest(tok, s[len(p.Text):]))
		}
	}
	if !single {
		best = max(best, float64(tok.unkScore)+bruteBest(tok, s[size:]))
	}
	return best
}

func firstRune(s string) (rune, int) {
	for _, r := range s {
		return r, len(string(r))
	}
	return 0, 0
}

func TestNewUnigramTokenizerErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*UnigramSpec)
		want string
	}{
		{"empty", func(s *UnigramSpec) { s.Pieces = nil }, "no pieces"},
		{"empty piece", func(s *UnigramSpec) { s.Pieces[3].Text = "" }, "piece 3 is empty"},
		{"not utf-8", func(s *UnigramSpec) { s.Pieces[3].Text = "a\xff" }, `piece 3 ("a\xff") is not valid UTF-8`},
		{"bad type", func(s *UnigramSpec) { s.Pieces[3].Type = 7 }, "has type 7"},
		{"duplicate", func(s *UnigramSpec) { s.Pieces[4].Text = "a" }, `piece 4 ("a") repeats piece 3`},
		{"two unknown", func(s *UnigramSpec) { s.Pieces[1].Type = PieceUnknown }, "both of type UNKNOWN"},
		{"no unknown", func(s *UnigramSpec) { s.Pieces[0].Type = PieceControl }, "no piece of type UNKNOWN"},
		{"unk id", func(s *UnigramSpec) { s.UnkID = 2 }, "unknown id 2, but the UNKNOWN piece is 0"},
		{"byte without fallback", func(s *UnigramSpec) { s.Pieces[1] = UnigramPiece{"<0x41>", 0, PieceByte} }, "byte pieces although byte fallback is off"},
		{"bad byte", func(s *UnigramSpec) { s.ByteFallback = true; s.Pieces[1] = UnigramPiece{"<0x4g>", 0, PieceByte} }, `byte piece 1 is "<0x4g>"`},
		{"eos range", func(s *UnigramSpec) { s.EOSID = 6 }, "EOS id 6 outside the 6 pieces"},
		{"add bos", func(s *UnigramSpec) { s.AddBOS = true }, "adding BOS is asked for"},
		{"charsmap", func(s *UnigramSpec) { s.PrecompiledCharsMap = []byte{8, 0, 0, 0, 1} }, "declares a trie of 8 bytes"},
		{"charsmap size", func(s *UnigramSpec) { s.PrecompiledCharsMap = []byte{3, 0, 0, 0, 1, 2, 3} }, "not a positive multiple of 4"},
	} {
		spec := tinySpec()
		c.edit(&spec)
		_, err := NewUnigramTokenizer(spec)
		if err == nil || !errors.Is(err, ErrUnigram) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrUnigram saying %q", c.name, err, c.want)
		}
	}
}

func TestUnigramSpecIsACopy(t *testing.T) {
	spec := tinySpec()
	tok := mustTokenizer(t, spec)
	spec.Pieces[5].Text = "▁ba"
	s := tok.Spec()
	s.Pieces[3].Text = "zz"
	if tok.Piece(5) != "▁ab" || tok.Piece(3) != "a" {
		t.Error("the tokenizer shares its vocabulary with a caller")
	}
}

func TestUnigramLayouts(t *testing.T) {
	tok := t5Tokenizer(t)
	empty := tok.ChunkedLayout(nil, FluxT5Length)
	if len(empty.IDs) != 256 || empty.IDs[0] != 1 || slices.ContainsFunc(empty.IDs[1:], func(id int32) bool { return id != 0 }) {
		t.Errorf("empty prompt: %v, want </s> then 255 zeros", empty.IDs[:8])
	}
	if empty.Source[0] != LayoutSpecial || empty.Source[1] != LayoutPadding {
		t.Errorf("empty prompt sources %v", empty.Source[:3])
	}
	ids := make([]int32, 300)
	for i := range ids {
		ids[i] = int32(100 + i)
	}
	l := tok.ChunkedLayout(ids, 256)
	if len(l.IDs) != 512 {
		t.Fatalf("300 ids in chunks of 256: %d ids, want 512", len(l.IDs))
	}
	if l.IDs[254] != 354 || l.IDs[255] != 1 || l.IDs[256] != 355 || l.Source[256] != 255 {
		t.Errorf("chunk boundary: %v sources %v", l.IDs[253:258], l.Source[253:258])
	}
	if l.IDs[256+44] != 399 || l.IDs[256+45] != 1 || l.IDs[256+46] != 0 || l.IDs[511] != 0 {
		t.Errorf("second chunk end: %v", l.IDs[256+43:256+48])
	}
	mask := l.Mask()
	if !mask[255] || !mask[256+45] || mask[256+46] {
		t.Errorf("mask wrong around the padding")
	}
	exact := tok.ChunkedLayout(ids[:255], 256)
	if len(exact.IDs) != 256 || exact.IDs[255] != 1 {
		t.Errorf("255 ids fill one chunk of 256 with </s> last; got %d ids ending %d", len(exact.IDs), exact.IDs[len(exact.IDs)-1])
	}
	tr := tok.TruncatedLayout(ids, 256)
	if len(tr.IDs) != 256 || tr.IDs[254] != 354 || tr.IDs[255] != 1 {
		t.Errorf("truncated layout ends %v, want ... 354 1", tr.IDs[250:])
	}
	short := tok.TruncatedLayout(ids[:3], 8)
	if want := []int32{100, 101, 102, 1, 0, 0, 0, 0}; !slices.Equal(short.IDs, want) {
		t.Errorf("short truncated layout %v, want %v", short.IDs, want)
	}
	if got := tok.EncodeChunked("A long paragraph for summarization.", 12); !slices.Equal(got, []int32{71, 307, 8986, 21, 4505, 1635, 1707, 5, 1, 0, 0, 0}) {
		t.Errorf("EncodeChunked = %v", got)
	}
	if got := tok.EncodeTruncated("A long paragraph for summarization.", 4); !slices.Equal(got, []int32{71, 307, 8986, 1}) {
		t.Errorf("EncodeTruncated = %v", got)
	}
	if got := tok.TruncatedLayout(ids, 0).IDs; len(got) != 0 {
		t.Errorf("length 0 gives %v", got)
	}
	if got := tok.ChunkedLayout(ids[:2], 1).IDs; !slices.Equal(got, []int32{100, 101, 1}) {
		t.Errorf("chunk length 1 gives %v, want the unpadded sequence", got)
	}
}

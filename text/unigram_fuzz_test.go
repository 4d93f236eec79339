package text

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sdtool/sdtool/formats/gguf"
)

// fuzzTexts are what every tokenizer a fuzzer manages to build must encode without trouble.
var fuzzTexts = []string{"", " ", "a", "ab ab", "  \u00a0x\xff<s></s>", "▁▁", "é\u0301ﬁ①😂", strings.Repeat("ab", 40)}

// checkTokenizerInvariants encodes a few texts and checks what must hold for any valid tokenizer: ids in
// range, pieces that spell the normalized text, no two unknown pieces in a row, special tokens where the
// spec says, layouts of the asked length, and the GGUF metadata giving the same encodings back.
func checkTokenizerInvariants(t *testing.T, tok *UnigramTokenizer, texts []string) {
	t.Helper()
	spec := tok.Spec()
	n := int32(tok.VocabSize())
	back, err := UnigramFromMetadata("fuzz", tok.GGUFMetadata())
	if err != nil {
		t.Fatalf("GGUF metadata of a valid tokenizer does not read back: %v", err)
	}
	for _, text := range texts {
		norm := tok.Normalize(text)
		if !utf8.ValidString(norm) {
			t.Fatalf("Normalize(%q) = %q is not valid UTF-8", text, norm)
		}
		ids, pieces := tok.Segment(text)
		if len(ids) != len(pieces) {
			t.Fatalf("%d ids for %d pieces", len(ids), len(pieces))
		}
		if !spec.ByteFallback && strings.Join(pieces, "") != norm {
			t.Fatalf("pieces %q do not spell %q", pieces, norm)
		}
		for i, id := range ids {
			if id < 0 || id >= n {
				t.Fatalf("id %d out of range", id)
			}
			if i > 0 && id == spec.UnkID && ids[i-1] == spec.UnkID {
				t.Fatalf("two unknown pieces in a row: %v", ids)
			}
			if ty := spec.Pieces[id].Type; ty == PieceControl || ty == PieceUnused {
				t.Fatalf("segmentation produced %s piece %d", ty, id)
			}
		}
		enc := tok.Encode(text)
		if spec.AddEOS && (len(enc) == 0 || enc[len(enc)-1] != spec.EOSID) {
			t.Fatalf("Encode(%q) = %v does not end with EOS %d", text, enc, spec.EOSID)
		}
		if got := back.Encode(text); !slices.Equal(got, enc) {
			t.Fatalf("read back from GGUF metadata, %q encodes to %v instead of %v", text, got, enc)
		}
		if l := tok.ChunkedLayout(ids, 8); len(l.IDs)%8 != 0 && tok.specialCount() < 8 || len(l.IDs) != len(l.Source) {
			t.Fatalf("chunked layout of %d ids has %d ids, %d sources", len(ids), len(l.IDs), len(l.Source))
		}
		if l := tok.TruncatedLayout(ids, 5); len(l.IDs) != 5 {
			t.Fatalf("truncated layout of length 5 has %d ids", len(l.IDs))
		}
	}
}

func FuzzSentencePieceModel(f *testing.F) {
	f.Add(spmEncodeModel(tinySpec(), spmModelTypeUnigram))
	spec := tinySpec()
	spec.ByteFallback = true
	for b := range 256 {
		spec.Pieces = append(spec.Pieces, UnigramPiece{Text: string([]byte{'<', '0', 'x', "0123456789ABCDEF"[b>>4], "0123456789ABCDEF"[b&15], '>'}), Type: PieceByte})
	}
	spec.Pieces = append(spec.Pieces, UnigramPiece{"<x>", 0, PieceUserDefined}, UnigramPiece{"ab", 1, PieceUnused})
	spec.PrecompiledCharsMap = tinyCharsMap()
	f.Add(spmEncodeModel(spec, spmModelTypeUnigram))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := ParseSentencePieceModel("fuzz.model", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.model: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		checkTokenizerInvariants(t, tok, fuzzTexts)
	})
}

func FuzzUnigramJSON(f *testing.F) {
	f.Add([]byte(tinyJSON))
	f.Add([]byte(strings.Replace(tinyJSON, `"normalizer": null`, `"normalizer": {"type": "Sequence", "normalizers": [{"type": "Strip"},
		{"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"}, {"type": "Prepend", "prepend": "▁"}]}`, 1)))
	f.Add([]byte(`{"model": {"vocab": [["<unk>", 0]], "unk_id": 0}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := ParseUnigramJSON("fuzz.json", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.json: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		checkTokenizerInvariants(t, tok, fuzzTexts)
	})
}

// FuzzUnigramFromGGUF reads tokenizers out of fuzzed GGUF files.
func FuzzUnigramFromGGUF(f *testing.F) {
	var buf bytes.Buffer
	tiny, err := NewUnigramTokenizer(tinySpec())
	if err != nil {
		f.Fatal(err)
	}
	w, err := gguf.NewWriter(&buf, nil, tiny.GGUFMetadata(), nil)
	if err != nil {
		f.Fatal(err)
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := gguf.Parse(bytes.NewReader(data), int64(len(data)), "fuzz.gguf")
		if err != nil {
			return
		}
		tok, err := UnigramFromMetadata("fuzz.gguf", m.Metadata())
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.gguf: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		checkTokenizerInvariants(t, tok, fuzzTexts)
	})
}

// FuzzUnigramEncode encodes fuzzed text with the real T5 tokenizer.
func FuzzUnigramEncode(f *testing.F) {
	tok := t5Tokenizer(f)
	for _, s := range spmTestLines(20) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > maxFuzzText {
			return
		}
		checkTokenizerInvariantsOnce(t, tok, text)
	})
}

// checkTokenizerInvariantsOnce is checkTokenizerInvariants for one text, without the metadata round trip
// (which would rebuild T5's tokenizer on every input).
func checkTokenizerInvariantsOnce(t *testing.T, tok *UnigramTokenizer, text string) {
	norm := tok.Normalize(text)
	if !utf8.ValidString(norm) {
		t.Fatalf("Normalize(%q) = %q is not valid UTF-8", text, norm)
	}
	ids, pieces := tok.Segment(text)
	if strings.Join(pieces, "") != norm {
		t.Fatalf("pieces %q do not spell %q", pieces, norm)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= tok.VocabSize() || i > 0 && id == tok.UnkID() && ids[i-1] == id {
			t.Fatalf("bad ids %v", ids)
		}
	}
}

// FuzzSPMCharsMap walks fuzzed double-array tries.
func FuzzSPMCharsMap(f *testing.F) {
	f.Add(tinyCharsMap(), "axb")
	f.Add([]byte{4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 'a', 0}, "a")
	f.Fuzz(func(t *testing.T, blob []byte, s string) {
		cm, err := parseCharsMap(blob)
		if err != nil {
			return
		}
		if _, n := cm.longestPrefix(s); n < 0 || n > len(s) {
			t.Fatalf("match of %d bytes in %d", n, len(s))
		}
	})
}

package text

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A protobuf encoder for building test models (the package itself only reads them).

func pbKey(b []byte, num, wt int) []byte { return binary.AppendUvarint(b, uint64(num)<<3|uint64(wt)) }

func pbVarintF(b []byte, num int, v uint64) []byte {
	return binary.AppendUvarint(pbKey(b, num, pbVarint), v)
}

func pbBytesF(b []byte, num int, v []byte) []byte {
	b = binary.AppendUvarint(pbKey(b, num, pbBytes), uint64(len(v)))
	return append(b, v...)
}

func pbFloatF(b []byte, num int, v float32) []byte {
	return binary.LittleEndian.AppendUint32(pbKey(b, num, pbFixed32), math.Float32bits(v))
}

func pbBool(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// spmEncodeModel serializes spec as a SentencePiece ModelProto, with model type modelType.
func spmEncodeModel(spec UnigramSpec, modelType uint64) []byte {
	var out []byte
	for _, p := range spec.Pieces {
		var m []byte
		m = pbBytesF(m, 1, []byte(p.Text))
		m = pbFloatF(m, 2, p.Score)
		if p.Type != PieceNormal {
			m = pbVarintF(m, 3, uint64(p.Type))
		}
		out = pbBytesF(out, 1, m)
	}
	var tr []byte
	tr = pbVarintF(tr, 3, modelType)
	tr = pbVarintF(tr, 24, pbBool(spec.TreatWhitespaceAsSuffix))
	tr = pbVarintF(tr, 35, pbBool(spec.ByteFallback))
	tr = pbVarintF(tr, 40, uint64(spec.UnkID))
	name := func(id int32) string {
		if id < 0 {
			return "<none>"
		}
		return spec.Pieces[id].Text
	}
	tr = pbBytesF(tr, 46, []byte(name(spec.BOSID)))
	tr = pbBytesF(tr, 47, []byte(name(spec.EOSID)))
	tr = pbBytesF(tr, 48, []byte(name(spec.PadID)))
	out = pbBytesF(out, 2, tr)
	var nm []byte
	nm = pbBytesF(nm, 1, []byte("test"))
	if len(spec.PrecompiledCharsMap) > 0 {
		nm = pbBytesF(nm, 2, spec.PrecompiledCharsMap)
	}
	nm = pbVarintF(nm, 3, pbBool(spec.AddDummyPrefix))
	nm = pbVarintF(nm, 4, pbBool(spec.RemoveExtraWhitespaces))
	nm = pbVarintF(nm, 5, pbBool(spec.EscapeWhitespaces))
	return pbBytesF(out, 3, nm)
}

func TestSentencePieceRoundTrip(t *testing.T) {
	for _, spec := range []UnigramSpec{tinySpec(), t5Tokenizer(t).Spec()} {
		tok, err := ParseSentencePieceModel("enc.model", spmEncodeModel(spec, spmModelTypeUnigram))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(tok.Spec(), spec) {
			t.Errorf("%d pieces: the model read back differs from the one encoded", len(spec.Pieces))
		}
	}
}

// TestSentencePieceDefaults reads a model that states nothing but its pieces: the proto's defaults apply
// (dummy prefix, whitespace removal and escaping on; "</s>" found by name only when it is a control piece).
func TestSentencePieceDefaults(t *testing.T) {
	var data []byte
	for _, p := range []UnigramPiece{{"<unk>", 0, PieceUnknown}, {"</s>", 0, PieceNormal}, {"▁a", -1, PieceNormal}} {
		var m []byte
		m = pbBytesF(m, 1, []byte(p.Text))
		m = pbFloatF(m, 2, p.Score)
		m = pbVarintF(m, 3, uint64(p.Type))
		m = pbVarintF(m, 99, 7)         // an unknown field is skipped
		m = pbBytesF(m, 200, []byte{1}) // and so is an extension
		m = pbFloatF(m, 201, 2)         // of any wire type
		m = binary.LittleEndian.AppendUint64(pbKey(m, 202, pbFixed64), 1)
		data = pbBytesF(data, 1, m)
	}
	tok, err := ParseSentencePieceModel("min.model", data)
	if err != nil {
		t.Fatal(err)
	}
	s := tok.Spec()
	if !s.AddDummyPrefix || !s.RemoveExtraWhitespaces || !s.EscapeWhitespaces || s.ByteFallback || s.TreatWhitespaceAsSuffix {
		t.Errorf("defaults %+v", s)
	}
	if s.EOSID != -1 || s.AddEOS {
		t.Errorf("a normal piece named </s> became EOS %d (add %v)", s.EOSID, s.AddEOS)
	}
	if got := tok.Encode(" a "); len(got) != 1 || got[0] != 2 {
		t.Errorf("Encode(\" a \") = %v, want [2]", got)
	}
}

func TestSentencePieceErrors(t *testing.T) {
	good := spmEncodeModel(tinySpec(), spmModelTypeUnigram)
	piece := func(fields []byte) []byte { return pbBytesF(append([]byte(nil), good...), 1, fields) }
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "has no pieces (is it a SentencePiece model file?)"},
		{"text", []byte("hello, world\n"), "sentencepiece model:"},
		{"bpe", spmEncodeModel(tinySpec(), 2), "model type is BPE: not a unigram model"},
		{"char", spmEncodeModel(tinySpec(), 4), "model type is CHAR"},
		{"cut", good[:len(good)-3], "runs past the end"},
		{"bad key", append(append([]byte(nil), good...), 0x80), "bad field key"},
		{"field zero", append(append([]byte(nil), good...), 0x00), "field number 0"},
		{"group", append(append([]byte(nil), good...), 0x0B), "unsupported wire type 3"},
		{"fixed64 cut", append(append([]byte(nil), good...), 0x09, 1, 2), "fixed64 cut short"},
		{"fixed32 cut", append(append([]byte(nil), good...), 0x0D, 1), "fixed32 cut short"},
		{"varint cut", append(append([]byte(nil), good...), 0x08, 0xFF), "bad varint"},
		{"length cut", append(append([]byte(nil), good...), 0x0A, 0xFF), "bad length"},
		{"pieces varint", pbVarintF(append([]byte(nil), good...), 1, 3), "field pieces has wire type 0"},
		{"piece text type", piece(pbVarintF(nil, 1, 5)), "piece 6: field piece has wire type 0"},
		{"score type", piece(pbVarintF(pbBytesF(nil, 1, []byte("z")), 2, 5)), "field score has wire type 0"},
		{"type type", piece(pbFloatF(pbBytesF(nil, 1, []byte("z")), 3, 1)), "field type has wire type 5"},
		{"piece type value", piece(pbVarintF(pbBytesF(nil, 1, []byte("z")), 3, 9)), `piece 6 ("z") has type 9`},
		{"empty piece", piece(pbFloatF(nil, 2, -1)), "piece 6 is empty"},
		{"duplicate", piece(pbBytesF(nil, 1, []byte("a"))), `piece 6 ("a") repeats piece 3`},
		{"trainer type", pbVarintF(append([]byte(nil), good...), 2, 1), "field trainer_spec has wire type 0"},
		{"trainer field", pbBytesF(append([]byte(nil), good...), 2, pbBytesF(nil, 35, []byte{1})), "trainer_spec: field byte_fallback has wire type 2"},
		{"normalizer field", pbBytesF(append([]byte(nil), good...), 3, pbVarintF(nil, 2, 1)), "normalizer_spec: field precompiled_charsmap has wire type 0"},
		{"charsmap", pbBytesF(append([]byte(nil), good...), 3, pbBytesF(nil, 2, []byte{1, 2, 3})), "precompiled charsmap of 3 bytes is too short"},
	} {
		_, err := ParseSentencePieceModel("bad.model", c.data)
		if err == nil || !errors.Is(err, ErrUnigram) || !strings.HasPrefix(err.Error(), "bad.model: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrUnigram naming bad.model and saying %q", c.name, err, c.want)
		}
	}
}

func TestLoadUnigram(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, data []byte) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	clipJSON := []byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`)
	spm := spmEncodeModel(tinySpec(), spmModelTypeUnigram)

	// A diffusers Flux folder: CLIP's BPE tokenizer.json in tokenizer/, T5's in tokenizer_2/.
	write("flux/tokenizer/tokenizer.json", clipJSON)
	write("flux/tokenizer_2/spiece.model", spm)
	tok, err := LoadUnigram(filepath.Join(dir, "flux"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 6 {
		t.Errorf("loaded %d pieces", tok.VocabSize())
	}
	// A JSON tokenizer under any name, found by its first byte.
	p := write("tok.txt", []byte("\n "+tinyJSON))
	if tok, err := LoadUnigram(p); err != nil || tok.VocabSize() != 6 {
		t.Errorf("tokenizer.json under another name: %v", err)
	}
	// A folder with only CLIP's tokenizer says what it passed over.
	write("clip/tokenizer.json", clipJSON)
	if _, err := LoadUnigram(filepath.Join(dir, "clip")); err == nil || !strings.Contains(err.Error(), "passed over") ||
		!strings.Contains(err.Error(), "model type is BPE") {
		t.Errorf("CLIP-only folder: %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadUnigram(filepath.Join(dir, "empty")); err == nil || !strings.Contains(err.Error(), "no spiece.model") {
		t.Errorf("empty folder: %v", err)
	}
	// A malformed unigram file in a folder is an error, not skipped.
	write("broken/spiece.model", spm[:len(spm)-2])
	if _, err := LoadUnigram(filepath.Join(dir, "broken")); err == nil || !strings.Contains(err.Error(), "spiece.model") {
		t.Errorf("broken folder: %v", err)
	}
	if _, err := LoadUnigram(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing path: %v", err)
	}
}

// tinyCharsMap builds by hand a precompiled charsmap with one rule, "x" to "y": a double array whose root
// (unit 0) has offset 1, so the child for 'x' (0x78) sits at 1^0x78 = 121; that unit carries the label,
// the leaf bit and offset 1, so its value unit sits at 121^1 = 120 and holds offset 0 of the strings "y\0".
func tinyCharsMap() []byte {
	units := make([]uint32, 122)
	units[0] = 1 << 10
	units[121] = 'x' | 1<<8 | 1<<10
	units[120] = 1<<31 | 0
	blob := binary.LittleEndian.AppendUint32(nil, uint32(4*len(units)))
	for _, u := range units {
		blob = binary.LittleEndian.AppendUint32(blob, u)
	}
	return append(blob, 'y', 0)
}

func TestSPMCharsMapByHand(t *testing.T) {
	spec := tinySpec()
	spec.PrecompiledCharsMap = tinyCharsMap()
	spec.Pieces = append(spec.Pieces, UnigramPiece{"<x>", 0, PieceUserDefined})
	tok := mustTokenizer(t, spec)
	// The rule rewrites x, but not inside a user-defined symbol, which bypasses normalization.
	if got := tok.Normalize("xax <x>"); got != "▁yay▁<x>" {
		t.Errorf("Normalize = %q, want ▁yay▁<x>", got)
	}
	cm, err := parseCharsMap(tinyCharsMap())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   string
		repl string
		n    int
	}{{"x", "y", 1}, {"xx", "y", 1}, {"a", "", 0}, {"", "", 0}, {"\x00", "", 0}, {"\xff", "", 0}} {
		if r, n := cm.longestPrefix(c.in); r != c.repl || n != c.n {
			t.Errorf("longestPrefix(%q) = %q, %d; want %q, %d", c.in, r, n, c.repl, c.n)
		}
	}
	// A value pointing past the strings, or at an unterminated string, matches nothing.
	bad := tinyCharsMap()
	bad[len(bad)-1] = 'z'
	if cm, err := parseCharsMap(bad); err != nil {
		t.Fatal(err)
	} else if _, n := cm.longestPrefix("x"); n != 0 {
		t.Error("unterminated replacement matched")
	}
	bad[len(bad)-2], bad[len(bad)-1] = 0xff, 0
	if cm, err := parseCharsMap(bad); err != nil {
		t.Fatal(err)
	} else if _, n := cm.longestPrefix("x"); n != 0 {
		t.Error("a replacement that is not UTF-8 matched")
	}
}

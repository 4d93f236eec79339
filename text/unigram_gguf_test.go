package text

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// writeGGUFMetadata writes a GGUF holding one small tensor and meta, and parses it back.
func writeGGUFMetadata(t *testing.T, meta formats.Metadata) formats.Metadata {
	t.Helper()
	tensors := []formats.Tensor{{Name: "token_embd.weight", Type: formats.F32, Shape: []int64{2, 4}}}
	var buf bytes.Buffer
	w, err := gguf.NewWriter(&buf, tensors, meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range w.Layout() {
		if _, err := w.Write(make([]byte, l.Size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "t5.gguf")
	if err != nil {
		t.Fatal(err)
	}
	return f.Metadata()
}

func TestUnigramGGUFRoundTrip(t *testing.T) {
	tok := t5Tokenizer(t)
	old := formats.Metadata{
		{Key: "general.architecture", Type: formats.TypeString, Value: "t5encoder"},
		{Key: GGUFTokenizerModel, Type: formats.TypeString, Value: "llama"},
		{Key: "tokenizer.ggml.merges", Type: formats.TypeString, Value: "stale"},
		{Key: "t5encoder.block_count", Type: formats.TypeUint32, Value: uint32(24)},
	}
	meta := EmbedUnigram(old, tok)
	if len(old) != 4 || old[1].Value != "llama" {
		t.Fatal("EmbedUnigram changed its input")
	}
	if meta[0].Key != "general.architecture" || meta[1].Key != "t5encoder.block_count" {
		t.Errorf("EmbedUnigram reordered the other keys: %s, %s", meta[0].Key, meta[1].Key)
	}
	if _, ok := meta.Get("tokenizer.ggml.merges"); ok {
		t.Error("EmbedUnigram kept a stale tokenizer key")
	}
	back := writeGGUFMetadata(t, meta)
	// The keys and types that llama.cpp and ComfyUI-GGUF read.
	for key, want := range map[string]string{
		GGUFTokenizerModel: "string", GGUFTokenizerPre: "string", GGUFTokenizerTokens: "array of string",
		GGUFTokenizerScores: "array of f32", GGUFTokenizerTokenType: "array of i32", GGUFTokenizerEOSID: "u32",
		GGUFTokenizerUnknownID: "u32", GGUFTokenizerPaddingID: "u32", GGUFTokenizerAddBOS: "bool",
		GGUFTokenizerAddEOS: "bool", GGUFTokenizerAddSpacePrefix: "bool", GGUFTokenizerRemoveExtraWS: "bool",
		GGUFTokenizerCharsMap: "array of u8",
	} {
		kv, ok := back.Get(key)
		if !ok {
			t.Errorf("%s missing", key)
			continue
		}
		got := kv.Type.String()
		if a, ok := kv.Value.(formats.Array); ok {
			got = "array of " + a.Elem.String()
		}
		if got != want {
			t.Errorf("%s is %s, want %s", key, got, want)
		}
	}
	if _, ok := back.Get(GGUFTokenizerBOSID); ok {
		t.Error("T5 has no <s>, but a BOS id was written")
	}
	if m, _ := back.String(GGUFTokenizerModel); m != "t5" {
		t.Errorf("tokenizer model %q, want t5", m)
	}
	got, err := UnigramFromMetadata("t5.gguf", back)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec(), tok.Spec()) {
		t.Fatal("the tokenizer read back from GGUF metadata differs from the one written")
	}
	checkPublishedRows(t, got, readPublishedRows(t, "testdata/t5/published_ids.jsonl"))
}

// TestUnigramGGUFNonDefaultFlags round-trips the flags llama.cpp has no key for, and BOS.
func TestUnigramGGUFNonDefaultFlags(t *testing.T) {
	spec := tinySpec()
	spec.EscapeWhitespaces, spec.TreatWhitespaceAsSuffix, spec.AddBOS = false, true, true
	spec.BOSID, spec.PadID = 1, 1
	tok := mustTokenizer(t, spec)
	back, err := UnigramFromMetadata("tiny.gguf", writeGGUFMetadata(t, tok.GGUFMetadata()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Spec(), tok.Spec()) {
		t.Fatalf("read back %+v\nwrote %+v", back.Spec(), tok.Spec())
	}
	// GGUF has no way to say "no padding token": it reads back as llama.cpp's default, 0.
	spec = tinySpec()
	back, err = UnigramFromMetadata("tiny.gguf", mustTokenizer(t, spec).GGUFMetadata())
	if err != nil {
		t.Fatal(err)
	}
	if back.PadID() != 0 {
		t.Errorf("a model without <pad> reads back with pad %d, want llama.cpp's default 0", back.PadID())
	}
}

// TestUnigramGGUFLlamaCppLayout reads metadata laid out as llama.cpp's converter lays out T5: the
// sentinels as user-defined pieces scored -1000 after the 32000 pieces, then unused [PADn] pieces up to
// the embedding's 32128 rows, and no flags for BOS/EOS. Text without sentinels encodes as before, and a
// written sentinel is cut out whole, as SentencePiece does with user-defined symbols.
func TestUnigramGGUFLlamaCppLayout(t *testing.T) {
	spec := t5Tokenizer(t).Spec()
	for i := 99; i >= 0; i-- {
		spec.Pieces = append(spec.Pieces, UnigramPiece{Text: fmt.Sprintf("<extra_id_%d>", i), Score: -1000, Type: PieceUserDefined})
	}
	for i := 1; len(spec.Pieces) < 32128; i++ {
		spec.Pieces = append(spec.Pieces, UnigramPiece{Text: fmt.Sprintf("[PAD%d]", i), Score: -1000, Type: PieceUnused})
	}
	tok, err := NewUnigramTokenizer(spec)
	if err != nil {
		t.Fatal(err)
	}
	var md formats.Metadata
	for _, kv := range tok.GGUFMetadata() {
		if kv.Key != GGUFTokenizerAddBOS && kv.Key != GGUFTokenizerAddEOS {
			md = append(md, kv)
		}
	}
	back, err := UnigramFromMetadata("t5-llamacpp.gguf", writeGGUFMetadata(t, md))
	if err != nil {
		t.Fatal(err)
	}
	if back.VocabSize() != 32128 || !back.Spec().AddEOS {
		t.Errorf("%d tokens, add EOS %v; want 32128 and true (llama.cpp's default)", back.VocabSize(), back.Spec().AddEOS)
	}
	checkPublishedRows(t, back, readPublishedRows(t, "testdata/t5/published_ids.jsonl"))
	if got, want := back.Encode("Hey <extra_id_0>!"), []int32{9459, 3, 32099, 55, 1}; !slices.Equal(got, want) {
		t.Errorf("sentinel text encodes to %v, want %v", got, want)
	}
}

func TestUnigramFromMetadataErrors(t *testing.T) {
	good := func() formats.Metadata {
		tok, err := NewUnigramTokenizer(tinySpec())
		if err != nil {
			t.Fatal(err)
		}
		return tok.GGUFMetadata()
	}
	set := func(key string, typ formats.ValueType, v any) formats.Metadata {
		md := good()
		for i := range md {
			if md[i].Key == key {
				md[i] = formats.KV{Key: key, Type: typ, Value: v}
				return md
			}
		}
		return append(md, formats.KV{Key: key, Type: typ, Value: v})
	}
	drop := func(key string) formats.Metadata {
		var md formats.Metadata
		for _, kv := range good() {
			if kv.Key != key {
				md = append(md, kv)
			}
		}
		return md
	}
	if _, err := UnigramFromMetadata("x.gguf", nil); !errors.Is(err, ErrNoUnigramTokenizer) {
		t.Errorf("no tokenizer keys: %v, want ErrNoUnigramTokenizer", err)
	}
	if _, err := UnigramFromMetadata("x.gguf", set(GGUFTokenizerModel, formats.TypeString, "gpt2")); !errors.Is(err, ErrNoUnigramTokenizer) ||
		!strings.Contains(err.Error(), `"gpt2"`) {
		t.Errorf("BPE tokenizer: %v, want ErrNoUnigramTokenizer naming gpt2", err)
	}
	strs := func(s ...string) formats.Array { return formats.Array{Elem: formats.TypeString, Values: s} }
	for _, c := range []struct {
		name string
		md   formats.Metadata
		want string
	}{
		{"model type", set(GGUFTokenizerModel, formats.TypeUint32, uint32(1)), "tokenizer.ggml.model: is a u32"},
		{"no tokens", drop(GGUFTokenizerTokens), "tokenizer.ggml.tokens: missing"},
		{"tokens type", set(GGUFTokenizerTokens, formats.TypeString, "a"), "not a non-empty array of strings"},
		{"scores length", set(GGUFTokenizerScores, formats.TypeArray, formats.Array{Elem: formats.TypeFloat32, Values: []float32{1}}), "has 1 entries for 6 tokens"},
		{"scores type", set(GGUFTokenizerScores, formats.TypeArray, strs("a", "b", "c", "d", "e", "f")), "array of string, not of floats"},
		{"types type", set(GGUFTokenizerTokenType, formats.TypeArray, strs("a", "b", "c", "d", "e", "f")), "array of string, not of integers"},
		{"type value", set(GGUFTokenizerTokenType, formats.TypeArray, formats.Array{Elem: formats.TypeInt32, Values: []int32{2, 3, 1, 1, 9, 1}}), "has type 9"},
		{"eos range", set(GGUFTokenizerEOSID, formats.TypeUint32, uint32(6)), "token id 6 outside the 6 tokens"},
		{"eos type", set(GGUFTokenizerEOSID, formats.TypeString, "one"), `is "one", not an integer`},
		{"flag text", set(GGUFTokenizerAddSpacePrefix, formats.TypeString, "yes"), "is a string, not a bool"},
		{"flag type", set(GGUFTokenizerAddSpacePrefix, formats.TypeUint8, uint8(1)), "is a u8, not a bool"},
		{"charsmap type", set(GGUFTokenizerCharsMap, formats.TypeArray, strs("x")), "not an array of bytes"},
		{"charsmap short", set(GGUFTokenizerCharsMap, formats.TypeArray, formats.Array{Elem: formats.TypeUint8, Values: []uint8{1, 2}}), "too short"},
		{"unk mismatch", set(GGUFTokenizerUnknownID, formats.TypeUint32, uint32(1)), "unknown id 1, but the UNKNOWN piece is 0"},
	} {
		_, err := UnigramFromMetadata("x.gguf", c.md)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "x.gguf: ") {
			t.Errorf("%s: error %v, want one naming x.gguf and saying %q", c.name, err, c.want)
		}
	}
}

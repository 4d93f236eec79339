package text

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// GGUF metadata keys of a unigram tokenizer, as llama.cpp names them (gguf-py's Keys.Tokenizer) and reads
// them for its "t5" (UGM) vocabulary; ComfyUI-GGUF's text-encoder loader rebuilds a SentencePiece model
// from the same keys. Types as gguf-py writes them: the model and pre-tokenizer names are strings, tokens
// an array of strings, scores of float32, token types of int32 (the PieceType numbers), token ids uint32,
// flags bool, and the precompiled charsmap an array of uint8.
const (
	GGUFTokenizerModel          = "tokenizer.ggml.model"
	GGUFTokenizerPre            = "tokenizer.ggml.pre"
	GGUFTokenizerTokens         = "tokenizer.ggml.tokens"
	GGUFTokenizerScores         = "tokenizer.ggml.scores"
	GGUFTokenizerTokenType      = "tokenizer.ggml.token_type"
	GGUFTokenizerBOSID          = "tokenizer.ggml.bos_token_id"
	GGUFTokenizerEOSID          = "tokenizer.ggml.eos_token_id"
	GGUFTokenizerUnknownID      = "tokenizer.ggml.unknown_token_id"
	GGUFTokenizerPaddingID      = "tokenizer.ggml.padding_token_id"
	GGUFTokenizerAddBOS         = "tokenizer.ggml.add_bos_token"
	GGUFTokenizerAddEOS         = "tokenizer.ggml.add_eos_token"
	GGUFTokenizerAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	GGUFTokenizerRemoveExtraWS  = "tokenizer.ggml.remove_extra_whitespaces"
	GGUFTokenizerCharsMap       = "tokenizer.ggml.precompiled_charsmap"
)

// The two SentencePiece flags llama.cpp has no key for (it always escapes whitespace and never treats it
// as a suffix); sdtool writes them, as bools, only when a model departs from those defaults.
const (
	GGUFUnigramEscapeWhitespaces       = "sdtool.tokenizer.unigram.escape_whitespaces"
	GGUFUnigramTreatWhitespaceAsSuffix = "sdtool.tokenizer.unigram.treat_whitespace_as_suffix"
)

// GGUFUnigramModelName is the tokenizer.ggml.model value of a unigram vocabulary: llama.cpp calls its
// SentencePiece unigram tokenizer "t5" whatever the model.
const GGUFUnigramModelName = "t5"

// GGUFMetadata returns the tokenizer as GGUF metadata under llama.cpp's keys, so that one model file
// carries its tokenizer: UnigramFromMetadata, llama.cpp and ComfyUI-GGUF read it back. Ids the model lacks
// (T5 has no <s>) are left out, as is an empty charsmap; a reader then assumes llama.cpp's defaults, so a
// model without </s> or <pad> reads back with 1 or 0 there when the vocabulary is that large.
func (t *UnigramTokenizer) GGUFMetadata() formats.Metadata {
	sp := &t.spec
	n := len(sp.Pieces)
	tokens := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	for i, p := range sp.Pieces {
		tokens[i], scores[i], types[i] = p.Text, p.Score, int32(p.Type)
	}
	str := func(k, v string) formats.KV { return formats.KV{Key: k, Type: formats.TypeString, Value: v} }
	flag := func(k string, v bool) formats.KV { return formats.KV{Key: k, Type: formats.TypeBool, Value: v} }
	md := formats.Metadata{
		str(GGUFTokenizerModel, GGUFUnigramModelName),
		str(GGUFTokenizerPre, "default"),
		{Key: GGUFTokenizerTokens, Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeString, Values: tokens}},
		{Key: GGUFTokenizerScores, Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeFloat32, Values: scores}},
		{Key: GGUFTokenizerTokenType, Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: types}},
	}
	for _, id := range []struct {
		key string
		id  int32
	}{{GGUFTokenizerBOSID, sp.BOSID}, {GGUFTokenizerEOSID, sp.EOSID}, {GGUFTokenizerUnknownID, sp.UnkID}, {GGUFTokenizerPaddingID, sp.PadID}} {
		if id.id >= 0 {
			md = append(md, formats.KV{Key: id.key, Type: formats.TypeUint32, Value: uint32(id.id)})
		}
	}
	md = append(md,
		flag(GGUFTokenizerAddBOS, sp.AddBOS),
		flag(GGUFTokenizerAddEOS, sp.AddEOS),
		flag(GGUFTokenizerAddSpacePrefix, sp.AddDummyPrefix),
		flag(GGUFTokenizerRemoveExtraWS, sp.RemoveExtraWhitespaces),
	)
	if len(sp.PrecompiledCharsMap) > 0 {
		md = append(md, formats.KV{Key: GGUFTokenizerCharsMap, Type: formats.TypeArray,
			Value: formats.Array{Elem: formats.TypeUint8, Values: append([]uint8(nil), sp.PrecompiledCharsMap...)}})
	}
	if !sp.EscapeWhitespaces {
		md = append(md, flag(GGUFUnigramEscapeWhitespaces, false))
	}
	if sp.TreatWhitespaceAsSuffix {
		md = append(md, flag(GGUFUnigramTreatWhitespaceAsSuffix, true))
	}
	return md
}

// EmbedUnigram returns meta with t's tokenizer keys in place of any tokenizer.ggml.* (and sdtool unigram)
// keys it had, leaving every other entry in order; meta itself is not changed.
func EmbedUnigram(meta formats.Metadata, t *UnigramTokenizer) formats.Metadata {
	out := make(formats.Metadata, 0, len(meta)+16)
	for _, kv := range meta {
		if strings.HasPrefix(kv.Key, "tokenizer.ggml.") || strings.HasPrefix(kv.Key, "sdtool.tokenizer.unigram.") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, t.GGUFMetadata()...)
}

// UnigramFromMetadata builds the unigram tokenizer stored in model metadata under llama.cpp's keys
// (GGUFMetadata's, or what llama.cpp's converter writes for T5). It returns ErrNoUnigramTokenizer when
// tokenizer.ggml.model is absent or names another algorithm. Missing ids take llama.cpp's defaults for
// "t5" (</s> 1, <unk> 2, <pad> 0, no <s>), missing flags its defaults (no dummy prefix, no whitespace
// removal, EOS added, BOS not); missing token types make every piece normal but the special ones, and
// byte fallback is on when the vocabulary has byte pieces. source (usually the model path) names the
// input in errors.
func UnigramFromMetadata(source string, md formats.Metadata) (*UnigramTokenizer, error) {
	r := &unigramMeta{source: source, md: md}
	spec, err := r.pieces()
	if err != nil {
		return nil, err
	}
	unkGiven, err := r.ids(&spec)
	if err != nil {
		return nil, err
	}
	if err := r.types(&spec); err != nil {
		return nil, err
	}
	if !unkGiven {
		// Without the key, the piece typed UNKNOWN is the unknown token wherever it is.
		for i, p := range spec.Pieces {
			if p.Type == PieceUnknown {
				spec.UnkID = int32(i)
				break
			}
		}
	}
	if err := r.flags(&spec); err != nil {
		return nil, err
	}
	if err := r.charsMap(&spec); err != nil {
		return nil, err
	}
	t, err := NewUnigramTokenizer(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: metadata tokenizer: %w", source, err)
	}
	return t, nil
}

// unigramMeta reads a unigram tokenizer from metadata, naming source in
// its errors.
type unigramMeta struct {
	source string
	md     formats.Metadata
}

// fail is the error for a bad value of key.
func (r *unigramMeta) fail(key, format string, a ...any) error {
	return fmt.Errorf("%s: %w: metadata key %s: %s", r.source, ErrUnigram, key, fmt.Sprintf(format, a...))
}

// pieces checks that the metadata holds a unigram tokenizer and returns a
// spec with its pieces and scores.
func (r *unigramMeta) pieces() (UnigramSpec, error) {
	var spec UnigramSpec
	kv, ok := r.md.Get(GGUFTokenizerModel)
	if !ok {
		return spec, fmt.Errorf("%s: %w (no key %s)", r.source, ErrNoUnigramTokenizer, GGUFTokenizerModel)
	}
	model, ok := kv.Value.(string)
	if !ok {
		return spec, r.fail(GGUFTokenizerModel, "is a %s, not a string", kv.Type)
	}
	if model != GGUFUnigramModelName {
		return spec, fmt.Errorf("%s: %w: %s is %q, not the unigram tokenizer %q", r.source, ErrNoUnigramTokenizer, GGUFTokenizerModel, model, GGUFUnigramModelName)
	}
	kv, ok = r.md.Get(GGUFTokenizerTokens)
	if !ok {
		return spec, r.fail(GGUFTokenizerTokens, "missing")
	}
	arr, _ := kv.Value.(formats.Array)
	tokens, ok := arr.Values.([]string)
	if !ok || len(tokens) == 0 {
		return spec, r.fail(GGUFTokenizerTokens, "is not a non-empty array of strings")
	}
	n := len(tokens)
	spec = UnigramSpec{Pieces: make([]UnigramPiece, n), EscapeWhitespaces: true}
	for i, s := range tokens {
		spec.Pieces[i].Text = s
	}
	if kv, ok := r.md.Get(GGUFTokenizerScores); ok {
		scores, err := metadataFloats(kv, n)
		if err != nil {
			return spec, r.fail(GGUFTokenizerScores, "%v", err)
		}
		for i, s := range scores {
			spec.Pieces[i].Score = s
		}
	}
	return spec, nil
}

// ids sets the special token ids, llama.cpp's defaults for "t5" where a
// key is missing (-1 when the vocabulary is too small for one), and says
// whether the unknown token's id was given.
func (r *unigramMeta) ids(spec *UnigramSpec) (unkGiven bool, err error) {
	n := len(spec.Pieces)
	ids := []struct {
		key string
		def int64
		dst *int32
	}{
		{GGUFTokenizerBOSID, -1, &spec.BOSID}, {GGUFTokenizerEOSID, 1, &spec.EOSID},
		{GGUFTokenizerUnknownID, 2, &spec.UnkID}, {GGUFTokenizerPaddingID, 0, &spec.PadID},
	}
	for _, id := range ids {
		v := id.def
		if kv, ok := r.md.Get(id.key); ok {
			unkGiven = unkGiven || id.dst == &spec.UnkID
			if v, err = metadataInt(kv); err != nil {
				return false, r.fail(id.key, "%v", err)
			}
			if v < 0 || v >= int64(n) {
				return false, r.fail(id.key, "token id %d outside the %d tokens", v, n)
			}
		} else if v >= int64(n) {
			v = -1
		}
		*id.dst = int32(v)
	}
	return unkGiven, nil
}

// types sets the pieces' types: as stored (byte fallback on when a piece
// is a byte), or every piece normal but the special ones.
func (r *unigramMeta) types(spec *UnigramSpec) error {
	kv, ok := r.md.Get(GGUFTokenizerTokenType)
	if !ok {
		for i := range spec.Pieces {
			spec.Pieces[i].Type = PieceNormal
		}
		for _, id := range []int32{spec.BOSID, spec.EOSID, spec.PadID} {
			if id >= 0 {
				spec.Pieces[id].Type = PieceControl
			}
		}
		if spec.UnkID >= 0 {
			spec.Pieces[spec.UnkID].Type = PieceUnknown
		}
		return nil
	}
	types, err := metadataInts(kv, len(spec.Pieces))
	if err != nil {
		return r.fail(GGUFTokenizerTokenType, "%v", err)
	}
	for i, v := range types {
		if v < int64(PieceNormal) || v > int64(PieceByte) {
			return r.fail(GGUFTokenizerTokenType, "token %d (%q) has type %d, not one of 1..6", i, spec.Pieces[i].Text, v)
		}
		spec.Pieces[i].Type = PieceType(v)
		if spec.Pieces[i].Type == PieceByte {
			spec.ByteFallback = true
		}
	}
	return nil
}

// flags sets the normalizer's and the encoder's flags, llama.cpp's
// defaults where a key is missing (EOS added when there is one).
func (r *unigramMeta) flags(spec *UnigramSpec) error {
	spec.AddEOS = spec.EOSID >= 0
	for _, f := range []struct {
		key string
		dst *bool
	}{
		{GGUFTokenizerAddBOS, &spec.AddBOS}, {GGUFTokenizerAddEOS, &spec.AddEOS},
		{GGUFTokenizerAddSpacePrefix, &spec.AddDummyPrefix}, {GGUFTokenizerRemoveExtraWS, &spec.RemoveExtraWhitespaces},
		{GGUFUnigramEscapeWhitespaces, &spec.EscapeWhitespaces}, {GGUFUnigramTreatWhitespaceAsSuffix, &spec.TreatWhitespaceAsSuffix},
	} {
		kv, ok := r.md.Get(f.key)
		if !ok {
			continue
		}
		b, ok := kv.Value.(bool)
		if str, isStr := kv.Value.(string); isStr {
			// Safetensors metadata holds a carried bool as its text.
			var err error
			b, err = strconv.ParseBool(str)
			ok = err == nil
		}
		if !ok {
			return r.fail(f.key, "is a %s, not a bool", kv.Type)
		}
		*f.dst = b
	}
	return nil
}

// charsMap sets the normalizer's precompiled character map, when stored.
func (r *unigramMeta) charsMap(spec *UnigramSpec) error {
	kv, ok := r.md.Get(GGUFTokenizerCharsMap)
	if !ok {
		return nil
	}
	arr, _ := kv.Value.(formats.Array)
	switch v := arr.Values.(type) {
	case []uint8:
		spec.PrecompiledCharsMap = v
	case []int8: // llama.cpp reads the array's raw bytes whatever their declared type
		spec.PrecompiledCharsMap = make([]byte, len(v))
		for i, b := range v {
			spec.PrecompiledCharsMap[i] = byte(b)
		}
	default:
		return r.fail(GGUFTokenizerCharsMap, "is not an array of bytes")
	}
	return nil
}

// metadataInt reads an integer metadata value of any integer type, or its
// decimal text (safetensors metadata holds a carried number so).
func metadataInt(kv formats.KV) (int64, error) {
	switch v := kv.Value.(type) {
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("is %q, not an integer", v)
		}
		return n, nil
	case uint8:
		return int64(v), nil
	case int8:
		return int64(v), nil
	case uint16:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case uint32:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case uint64:
		if v > math.MaxInt64 {
			return 0, fmt.Errorf("value %d is too large", v)
		}
		return int64(v), nil
	case int64:
		return v, nil
	}
	return 0, fmt.Errorf("is a %s, not an integer", kv.Type)
}

// metadataInts reads an integer array of length n.
func metadataInts(kv formats.KV, n int) ([]int64, error) {
	arr, ok := kv.Value.(formats.Array)
	if !ok {
		return nil, fmt.Errorf("is a %s, not an array", kv.Type)
	}
	if arr.Len() != n {
		return nil, fmt.Errorf("has %d entries for %d tokens", arr.Len(), n)
	}
	out := make([]int64, n)
	switch v := arr.Values.(type) {
	case []int32:
		for i, x := range v {
			out[i] = int64(x)
		}
	case []uint32:
		for i, x := range v {
			out[i] = int64(x)
		}
	case []int8:
		for i, x := range v {
			out[i] = int64(x)
		}
	case []uint8:
		for i, x := range v {
			out[i] = int64(x)
		}
	case []int16:
		for i, x := range v {
			out[i] = int64(x)
		}
	case []uint16:
		for i, x := range v {
			out[i] = int64(x)
		}
	case []int64:
		copy(out, v)
	default:
		return nil, fmt.Errorf("is an array of %s, not of integers", arr.Elem)
	}
	return out, nil
}

// metadataFloats reads a float array of length n.
func metadataFloats(kv formats.KV, n int) ([]float32, error) {
	arr, ok := kv.Value.(formats.Array)
	if !ok {
		return nil, fmt.Errorf("is a %s, not an array", kv.Type)
	}
	if arr.Len() != n {
		return nil, fmt.Errorf("has %d entries for %d tokens", arr.Len(), n)
	}
	switch v := arr.Values.(type) {
	case []float32:
		return v, nil
	case []float64:
		out := make([]float32, n)
		for i, x := range v {
			out[i] = float32(x)
		}
		return out, nil
	}
	return nil, fmt.Errorf("is an array of %s, not of floats", arr.Elem)
}

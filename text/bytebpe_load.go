package text

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/sdtool/sdtool/formats"
)

// preTokenizerName names the pre-tokenizer of a tokenizer.json's
// pre_tokenizer (PreQwen2 or PreTekken when a Split in it has Qwen's or
// Tekken's pattern), "" when
// it is none sdtool recognises.
func preTokenizerName(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return ""
	}
	var walk func(any) string
	walk = func(v any) string {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["Regex"].(string); ok {
				switch r {
				case PreQwen2Regex:
					return PreQwen2
				case PreTekkenRegex:
					return PreTekken
				}
			}
			for _, e := range x {
				if n := walk(e); n != "" {
					return n
				}
			}
		case []any:
			for _, e := range x {
				if n := walk(e); n != "" {
					return n
				}
			}
		}
		return ""
	}
	return walk(v)
}

// loadVocabMerges reads a byte-level BPE vocabulary from vocab.json and
// merges.txt, with the added tokens of tokenizer_config.json beside them
// when it is there (Qwen keeps its control tokens only there). The
// pre-tokenizer is Qwen's: that layout carries no pattern.
func loadVocabMerges(vocabPath, mergesPath string) (*ByteBPEVocab, error) {
	vb, err := formats.ReadRegular(vocabPath, formats.MaxTokenizerFile)
	if err != nil {
		return nil, err
	}
	mb, err := formats.ReadRegular(mergesPath, formats.MaxTokenizerFile)
	if err != nil {
		return nil, err
	}
	merges, err := ParseMerges(mergesPath, string(mb))
	if err != nil {
		return nil, err
	}
	type added struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	var extra []added
	if cb, err := formats.ReadRegular(filepath.Join(filepath.Dir(vocabPath), "tokenizer_config.json"), formats.MaxTokenizerFile); err == nil {
		var cfg struct {
			Decoder map[string]added `json:"added_tokens_decoder"`
		}
		if err := json.Unmarshal(cb, &cfg); err != nil {
			return nil, fmt.Errorf("%s: not a tokenizer_config.json: %w", filepath.Join(filepath.Dir(vocabPath), "tokenizer_config.json"), err)
		}
		for k, a := range cfg.Decoder {
			id, err := strconv.Atoi(k)
			if err != nil {
				return nil, fmt.Errorf("tokenizer_config.json: added token id %q is not a number", k)
			}
			a.ID = id
			extra = append(extra, a)
		}
	}
	// Rebuild a tokenizer.json of the same content, so that one parser
	// checks both layouts.
	doc := map[string]any{
		"added_tokens": extra,
		"model":        map[string]any{"type": "BPE", "vocab": json.RawMessage(vb), "merges": merges},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	v, err := ParseByteBPE(vocabPath, b)
	if err != nil {
		return nil, err
	}
	v.Pre = PreQwen2
	return v, nil
}

// LoadByteBPETokenizer reads a byte-level BPE tokenizer from path: a
// tokenizer.json, a vocab.json with merges.txt beside it, or a folder
// holding either.
func LoadByteBPETokenizer(path string) (*ByteBPETokenizer, error) {
	v, err := LoadByteBPE(path)
	if err != nil {
		return nil, err
	}
	return NewByteBPETokenizer(path, v)
}

// ByteBPEFromMetadata builds the byte-level BPE tokenizer stored under
// llama.cpp's tokenizer.ggml.* keys (model "gpt2": tokens, token types,
// merges and pre-tokenizer, as llama.cpp's converter and `sdtool convert
// --tokenizer` write them). It returns an error wrapping
// ErrNoByteBPETokenizer when md holds no such vocabulary; source names the
// file in errors.
func ByteBPEFromMetadata(source string, md formats.Metadata) (*ByteBPETokenizer, error) {
	model, ok := md.String(GGUFTokenizerModel)
	if !ok {
		return nil, fmt.Errorf("%s: %w (no string key %s)", source, ErrNoByteBPETokenizer, GGUFTokenizerModel)
	}
	if model != GGUFByteBPEModelName {
		return nil, fmt.Errorf("%s: %w: %s is %q, not %q", source, ErrNoByteBPETokenizer, GGUFTokenizerModel, model, GGUFByteBPEModelName)
	}
	fail := func(key, what string) error {
		return fmt.Errorf("%s: %w: metadata key %s: %s", source, ErrTokenizer, key, what)
	}
	strs := func(key string) ([]string, error) {
		kv, ok := md.Get(key)
		if !ok {
			return nil, fail(key, "missing")
		}
		arr, _ := kv.Value.(formats.Array)
		s, ok := arr.Values.([]string)
		if !ok {
			return nil, fail(key, "is not an array of strings")
		}
		return s, nil
	}
	v := &ByteBPEVocab{}
	var err error
	if v.Tokens, err = strs(GGUFTokenizerTokens); err != nil {
		return nil, err
	}
	if len(v.Tokens) == 0 || len(v.Tokens) > maxByteBPETokens {
		return nil, fail(GGUFTokenizerTokens, fmt.Sprintf("%d tokens (want 1 to %d)", len(v.Tokens), maxByteBPETokens))
	}
	if v.Merges, err = strs(GGUFTokenizerMerges); err != nil {
		return nil, err
	}
	v.Types = make([]int32, len(v.Tokens))
	if kv, ok := md.Get(GGUFTokenizerTokenType); ok {
		types, err := metadataInts(kv, len(v.Tokens))
		if err != nil {
			return nil, fail(GGUFTokenizerTokenType, err.Error())
		}
		for i, t := range types {
			v.Types[i] = int32(t)
		}
	}
	v.Pre, _ = md.String(GGUFTokenizerPre)
	// llama.cpp takes a Tekken piece whole when it is a token, as tiktoken
	// does; the metadata has no key for it.
	v.IgnoreMerges = v.Pre == PreTekken
	return NewByteBPETokenizer(source, v)
}

// statFile reports whether path is a regular file.
func statFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// errNotByteBPE is returned by LoadByteBPE for a folder without a
// byte-level BPE tokenizer.
var errNotByteBPE = errors.New("no tokenizer.json, tekken.json, nor vocab.json with merges.txt")

// byteBPEFiles resolves path (a tokenizer.json, a tekken.json, a
// vocab.json, or a folder holding one) to the tokenizer.json or
// tekken.json (in that order), or to vocab.json and merges.txt.
func byteBPEFiles(path string) (tokJSON, vocab, merges string, err error) {
	dir := ""
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		dir = path
	} else if filepath.Base(path) == "vocab.json" {
		dir = filepath.Dir(path)
	} else {
		return path, "", "", nil
	}
	if t := filepath.Join(dir, "tokenizer.json"); dir == path && statFile(t) {
		return t, "", "", nil
	}
	if t := filepath.Join(dir, TekkenFile); dir == path && statFile(t) {
		return t, "", "", nil
	}
	vocab, merges = filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt")
	if statFile(vocab) && statFile(merges) {
		return "", vocab, merges, nil
	}
	return "", "", "", fmt.Errorf("%s: %w", path, errNotByteBPE)
}

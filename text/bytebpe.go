package text

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// Token types of llama.cpp's tokenizer.ggml.token_type.
const (
	TokenNormal      = 1
	TokenControl     = 3
	TokenUserDefined = 4
)

// GGUFTokenizerMerges is llama.cpp's key for a BPE vocabulary's merges.
const GGUFTokenizerMerges = "tokenizer.ggml.merges"

// GGUFByteBPEModelName is llama.cpp's tokenizer.ggml.model for a byte-level
// BPE vocabulary (GPT-2's, Llama 3's, Mistral's Tekken).
const GGUFByteBPEModelName = "gpt2"

// maxByteBPETokens bounds a vocabulary read from a file (the largest
// published ones hold about 260k tokens).
const maxByteBPETokens = 1 << 22

// ByteBPEVocab is a byte-level BPE vocabulary read from a Hugging Face
// tokenizer.json: its tokens in id order, spelt with GPT-2's
// byte-to-unicode table as that file spells them, their llama.cpp token
// types and the merges.
type ByteBPEVocab struct {
	// Tokens are the token strings by id.
	Tokens []string
	// Types are llama.cpp token types by id (TokenNormal, TokenControl
	// for special added tokens, TokenUserDefined for other added ones).
	Types []int32
	// Merges are the ranked merges as "left right".
	Merges []string
	// Pre names the pre-tokenizer as tokenizer.ggml.pre does (PreQwen2),
	// "" when the file's split is not one sdtool recognises.
	Pre string
	// IgnoreMerges takes a pre-tokenized piece whole when the vocabulary
	// has it (tokenizer.json's model.ignore_merges).
	IgnoreMerges bool
}

// LoadByteBPE reads a byte-level BPE vocabulary from path: a
// tokenizer.json, a vocab.json with merges.txt beside it, Mistral's
// tekken.json (ParseTekken), or a folder holding one of them.
func LoadByteBPE(path string) (*ByteBPEVocab, error) {
	path, vocab, merges, err := byteBPEFiles(path)
	if err != nil {
		return nil, err
	}
	if vocab != "" {
		return loadVocabMerges(vocab, merges)
	}
	if isTekkenPath(path) {
		return loadTekken(path)
	}
	b, err := formats.ReadRegular(path, formats.MaxTokenizerFile)
	if err != nil {
		return nil, err
	}
	return ParseByteBPE(path, b)
}

// ParseByteBPE parses a Hugging Face tokenizer.json whose model is
// byte-level BPE; source names the input in errors. Ids must cover
// 0..n-1 without gaps, and every token that is not special must be
// spelt in GPT-2's byte alphabet (the 256 runes bytes map to), as
// ComfyUI-GGUF decodes them back to bytes.
func ParseByteBPE(source string, b []byte) (*ByteBPEVocab, error) {
	var f struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Model struct {
			Type         string          `json:"type"`
			Vocab        json.RawMessage `json:"vocab"`
			Merges       json.RawMessage `json:"merges"`
			IgnoreMerges bool            `json:"ignore_merges"`
		} `json:"model"`
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: not a tokenizer.json: %w", source, err)
	}
	if f.Model.Type != "BPE" {
		return nil, fmt.Errorf("%s: model type %q, not a BPE tokenizer", source, f.Model.Type)
	}
	var vocab map[string]int
	if err := json.Unmarshal(f.Model.Vocab, &vocab); err != nil {
		return nil, fmt.Errorf("%s: vocab is not a token-to-id map: %w", source, err)
	}
	n := 0
	for _, id := range vocab {
		n = max(n, id+1)
	}
	for _, a := range f.AddedTokens {
		n = max(n, a.ID+1)
	}
	if n == 0 || n > maxByteBPETokens {
		return nil, fmt.Errorf("%s: %d tokens (want 1 to %d)", source, n, maxByteBPETokens)
	}
	v := &ByteBPEVocab{Tokens: make([]string, n), Types: make([]int32, n), IgnoreMerges: f.Model.IgnoreMerges,
		Pre: preTokenizerName(f.PreTokenizer)}
	set := make([]bool, n)
	put := func(id int, tok string, typ int32) error {
		if id < 0 || id >= n {
			return fmt.Errorf("%s: token %q has id %d, outside 0..%d", source, tok, id, n-1)
		}
		if set[id] && v.Tokens[id] != tok {
			return fmt.Errorf("%s: id %d is both %q and %q", source, id, v.Tokens[id], tok)
		}
		v.Tokens[id], v.Types[id], set[id] = tok, typ, true
		return nil
	}
	for tok, id := range vocab {
		if err := put(id, tok, TokenNormal); err != nil {
			return nil, err
		}
	}
	for _, a := range f.AddedTokens {
		typ := int32(TokenUserDefined)
		if a.Special {
			typ = TokenControl
		}
		if err := put(a.ID, a.Content, typ); err != nil {
			return nil, err
		}
	}
	_, runes := bytesToUnicode()
	alphabet := map[rune]bool{}
	for _, r := range runes {
		alphabet[r] = true
	}
	for id, ok := range set {
		if !ok {
			return nil, fmt.Errorf("%s: no token has id %d (ids must run 0..%d without gaps)", source, id, n-1)
		}
		if v.Types[id] == TokenControl {
			continue
		}
		for _, r := range v.Tokens[id] {
			if !alphabet[r] {
				return nil, fmt.Errorf("%s: token %d (%q) has %q, outside the byte-level alphabet: not a byte-level BPE vocabulary", source, id, v.Tokens[id], r)
			}
		}
	}
	if len(f.Model.Merges) > 0 {
		var pairs [][2]string
		if err := json.Unmarshal(f.Model.Merges, &v.Merges); err != nil {
			if err2 := json.Unmarshal(f.Model.Merges, &pairs); err2 != nil {
				return nil, fmt.Errorf("%s: merges are neither strings nor pairs: %w", source, err)
			}
			v.Merges = make([]string, len(pairs))
			for i, p := range pairs {
				v.Merges[i] = p[0] + " " + p[1]
			}
		}
		for i, m := range v.Merges {
			if strings.Count(m, " ") != 1 {
				return nil, fmt.Errorf("%s: merge %d (%q) is not two symbols", source, i, m)
			}
		}
	}
	return v, nil
}

// GGUFMetadata returns the vocabulary under llama.cpp's tokenizer.ggml.*
// keys: model "gpt2", the tokens, their types and the merges.
func (v *ByteBPEVocab) GGUFMetadata() formats.Metadata {
	md := formats.Metadata{
		{Key: GGUFTokenizerModel, Type: formats.TypeString, Value: GGUFByteBPEModelName},
		{Key: GGUFTokenizerTokens, Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeString, Values: v.Tokens}},
		{Key: GGUFTokenizerTokenType, Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: v.Types}},
	}
	if v.Pre != "" {
		md = append(md, formats.KV{Key: GGUFTokenizerPre, Type: formats.TypeString, Value: v.Pre})
	}
	if len(v.Merges) > 0 {
		md = append(md, formats.KV{Key: GGUFTokenizerMerges, Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeString, Values: v.Merges}})
	}
	return md
}

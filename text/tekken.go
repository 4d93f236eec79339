package text

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// TekkenFile is the name Mistral gives a Tekken vocabulary.
const TekkenFile = "tekken.json"

// tekkenJSON is the part of a tekken.json sdtool reads.
type tekkenJSON struct {
	Config struct {
		Pattern                 string `json:"pattern"`
		DefaultVocabSize        int    `json:"default_vocab_size"`
		DefaultNumSpecialTokens int    `json:"default_num_special_tokens"`
	} `json:"config"`
	Vocab []struct {
		Rank       int    `json:"rank"`
		TokenBytes string `json:"token_bytes"`
	} `json:"vocab"`
	SpecialTokens []struct {
		Rank     int    `json:"rank"`
		TokenStr string `json:"token_str"`
	} `json:"special_tokens"`
}

// ParseTekken reads a Mistral tekken.json (a tiktoken-style vocabulary: byte
// strings ranked by merge order, control tokens in front) as the byte-level
// BPE vocabulary Mistral's tokenizer.json and llama.cpp's GGUFs spell: ids
// 0..default_num_special_tokens-1 are the control tokens (unnamed ones
// "<SPECIAL_N>"), then the first default_vocab_size minus that many ranks,
// each spelt in GPT-2's byte alphabet; the merges are those the ranks imply
// (every split of a token into two tokens, ordered by the token's rank,
// then the parts'), and a piece that is a token is taken whole, as tiktoken
// does. source names the input in errors.
func ParseTekken(source string, b []byte) (*ByteBPEVocab, error) {
	var f tekkenJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: not a tekken.json: %w", source, err)
	}
	c := f.Config
	if c.Pattern != PreTekkenRegex {
		return nil, fmt.Errorf("%s: %w: config.pattern is not Tekken's split (%q)", source, ErrTokenizer, c.Pattern)
	}
	nSpecial, nVocab := c.DefaultNumSpecialTokens, c.DefaultVocabSize-c.DefaultNumSpecialTokens
	if nSpecial < len(f.SpecialTokens) || nVocab <= 256 || c.DefaultVocabSize > maxByteBPETokens || len(f.Vocab) < nVocab {
		return nil, fmt.Errorf("%s: %w: %d control tokens (%d named) and %d of %d ranks do not make a vocabulary of %d",
			source, ErrTokenizer, nSpecial, len(f.SpecialTokens), len(f.Vocab), nVocab, c.DefaultVocabSize)
	}
	v := &ByteBPEVocab{Tokens: make([]string, c.DefaultVocabSize), Types: make([]int32, c.DefaultVocabSize),
		Pre: PreTekken, IgnoreMerges: true}
	for i := range nSpecial {
		v.Tokens[i], v.Types[i] = fmt.Sprintf("<SPECIAL_%d>", i), TokenControl
	}
	for _, s := range f.SpecialTokens {
		if s.Rank < 0 || s.Rank >= nSpecial || s.TokenStr == "" {
			return nil, fmt.Errorf("%s: %w: control token %q has rank %d, outside 0..%d", source, ErrTokenizer, s.TokenStr, s.Rank, nSpecial-1)
		}
		v.Tokens[s.Rank] = s.TokenStr
	}
	_, runes := bytesToUnicode()
	raw := make([][]byte, nVocab)
	rank := make(map[string]int, nVocab)
	for i, e := range f.Vocab[:nVocab] {
		tb, err := base64.StdEncoding.DecodeString(e.TokenBytes)
		if err != nil || e.Rank != i || len(tb) == 0 {
			return nil, fmt.Errorf("%s: %w: vocab entry %d (rank %d, %q) is not the next rank's base64 bytes", source, ErrTokenizer, i, e.Rank, e.TokenBytes)
		}
		if _, dup := rank[string(tb)]; dup {
			return nil, fmt.Errorf("%s: %w: ranks %d and %d have the same bytes %q", source, ErrTokenizer, rank[string(tb)], i, tb)
		}
		raw[i], rank[string(tb)] = tb, i
		var sb strings.Builder
		for _, x := range tb {
			sb.WriteRune(runes[x])
		}
		v.Tokens[nSpecial+i], v.Types[nSpecial+i] = sb.String(), TokenNormal
	}
	v.Merges = tekkenMerges(raw, rank, v.Tokens[nSpecial:])
	return v, nil
}

// tekkenMerges derives the merges a ranked vocabulary implies: for each
// token of two bytes or more, every split into two tokens, the token's
// splits ordered by their parts' ranks (Hugging Face's conversion of
// tiktoken vocabularies does the same).
func tekkenMerges(raw [][]byte, rank map[string]int, spelt []string) []string {
	var merges []string
	type split struct{ l, r, at int }
	var splits []split
	for _, tb := range raw {
		splits = splits[:0]
		for at := 1; at < len(tb); at++ {
			l, okL := rank[string(tb[:at])]
			r, okR := rank[string(tb[at:])]
			if okL && okR {
				splits = append(splits, split{l, r, at})
			}
		}
		slices.SortFunc(splits, func(a, b split) int {
			if a.l != b.l {
				return a.l - b.l
			}
			return a.r - b.r
		})
		for _, s := range splits {
			merges = append(merges, spelt[s.l]+" "+spelt[s.r])
		}
	}
	return merges
}

// isTekkenPath reports whether path names a Tekken vocabulary (Mistral's
// file name).
func isTekkenPath(path string) bool { return filepath.Base(path) == TekkenFile }

// loadTekken reads the tekken.json at path.
func loadTekken(path string) (*ByteBPEVocab, error) {
	b, err := formats.ReadRegular(path, formats.MaxTokenizerFile)
	if err != nil {
		return nil, err
	}
	return ParseTekken(path, b)
}

package text

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// ErrNoByteBPETokenizer reports model metadata without a byte-level BPE
// vocabulary under llama.cpp's tokenizer.ggml.* keys.
var ErrNoByteBPETokenizer = errors.New("no byte-level BPE tokenizer in the model metadata")

// ByteBPETokenizer is a byte-level BPE tokenizer (GPT-2's scheme, as
// Qwen2, Qwen2.5 and Qwen3 use it): added tokens are cut out of the text
// first, the rest is split by the vocabulary's pre-tokenizer, each piece's
// UTF-8 bytes become symbols and are merged by rank. It adds no BOS or EOS
// (Qwen's prompts carry their own control tokens). Safe for concurrent use.
type ByteBPETokenizer struct {
	vocab  map[string]int32
	byteID [256]int32
	merges map[uint64]mergeInfo
	// added are the added tokens, longest first, matched in raw text;
	// addedFirst marks the bytes they start with.
	added      []addedToken
	addedFirst [256]bool
	split      func(string) []string
	// ignoreMerges takes a piece whole when the vocabulary has it
	// (tokenizers' BPE option of that name).
	ignoreMerges bool
	n            int

	mu    sync.Mutex
	cache map[string][]int32
}

type addedToken struct {
	text string
	id   int32
}

// splitters are the pre-tokenizers a ByteBPETokenizer implements, by the
// names of tokenizer.ggml.pre.
var splitters = map[string]func(string) []string{
	PreQwen2:  splitQwen2,
	PreTekken: splitTekken,
}

// NewByteBPETokenizer builds the tokenizer of v; source names it in
// errors. The vocabulary must hold the 256 byte symbols and every merge's
// parts and result, and its pre-tokenizer must be one this package
// implements (PreQwen2, PreTekken).
func NewByteBPETokenizer(source string, v *ByteBPEVocab) (*ByteBPETokenizer, error) {
	split, ok := splitters[v.Pre]
	if !ok {
		return nil, fmt.Errorf("%s: %w: pre-tokenizer %q is not one sdtool implements (%s, %s)", source, ErrTokenizer, v.Pre, PreQwen2, PreTekken)
	}
	t := &ByteBPETokenizer{vocab: make(map[string]int32, len(v.Tokens)), split: split, ignoreMerges: v.IgnoreMerges,
		n: len(v.Tokens), merges: make(map[uint64]mergeInfo, len(v.Merges)), cache: map[string][]int32{}}
	for id, s := range v.Tokens {
		if _, dup := t.vocab[s]; !dup {
			t.vocab[s] = int32(id)
		}
		if id < len(v.Types) && (v.Types[id] == TokenControl || v.Types[id] == TokenUserDefined) && s != "" {
			t.added = append(t.added, addedToken{s, int32(id)})
		}
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].text) > len(t.added[j].text) })
	for _, a := range t.added {
		t.addedFirst[a.text[0]] = true
	}
	_, runes := bytesToUnicode()
	for b := 0; b < 256; b++ {
		id, ok := t.vocab[string(runes[b])]
		if !ok {
			return nil, fmt.Errorf("%s: %w: byte symbol %q (byte 0x%02x) missing from the vocabulary", source, ErrTokenizer, string(runes[b]), b)
		}
		t.byteID[b] = id
	}
	for i, m := range v.Merges {
		l, r, _ := strings.Cut(m, " ")
		a, okA := t.vocab[l]
		b, okB := t.vocab[r]
		c, okC := t.vocab[l+r]
		if !okA || !okB || !okC {
			return nil, fmt.Errorf("%s: %w: merge %d (%q) has a part or result outside the vocabulary", source, ErrTokenizer, i+1, m)
		}
		k := pairKey(a, b)
		if _, dup := t.merges[k]; !dup { // the first rank wins, as in tokenizers
			t.merges[k] = mergeInfo{rank: int32(i), id: c}
		}
	}
	return t, nil
}

// VocabSize is the number of token ids (the vocabulary's and the added tokens').
func (t *ByteBPETokenizer) VocabSize() int { return t.n }

// TokenID returns the id of a token spelt as the vocabulary spells it.
func (t *ByteBPETokenizer) TokenID(s string) (int32, bool) {
	id, ok := t.vocab[s]
	return id, ok
}

// Encode returns the token ids of s: added tokens where they occur, the
// rest pre-tokenized and merged. The text is not normalized (Qwen's
// tokenizer.json asks for NFC, which leaves NFC text such as typed
// prompts unchanged).
func (t *ByteBPETokenizer) Encode(s string) []int32 {
	var ids []int32
	for len(s) > 0 {
		at, tok := t.nextAdded(s)
		for _, piece := range t.split(s[:at]) {
			ids = append(ids, t.bpe(piece)...)
		}
		if tok == nil {
			break
		}
		ids = append(ids, tok.id)
		s = s[at+len(tok.text):]
	}
	return ids
}

// nextAdded finds the first added token in s (the longest of those
// starting there), returning its offset, or len(s) and nil.
func (t *ByteBPETokenizer) nextAdded(s string) (int, *addedToken) {
	if len(t.added) == 0 {
		return len(s), nil
	}
	for i := 0; i < len(s); i++ {
		if !t.addedFirst[s[i]] {
			continue
		}
		for k := range t.added {
			if strings.HasPrefix(s[i:], t.added[k].text) {
				return i, &t.added[k]
			}
		}
	}
	return len(s), nil
}

// maxCachedPieces bounds the per-piece cache.
const maxCachedPieces = 1 << 14

// bpe returns the ids of one pre-tokenized piece.
func (t *ByteBPETokenizer) bpe(piece string) []int32 {
	t.mu.Lock()
	ids, ok := t.cache[piece]
	t.mu.Unlock()
	if ok {
		return ids
	}
	ids = t.merge(piece)
	t.mu.Lock()
	if len(t.cache) >= maxCachedPieces {
		clear(t.cache)
	}
	t.cache[piece] = ids
	t.mu.Unlock()
	return ids
}

// merge runs byte-pair encoding on piece's bytes: one symbol per byte,
// then the adjacent pair of lowest rank merged, every occurrence left to
// right, until no pair has a merge.
func (t *ByteBPETokenizer) merge(piece string) []int32 {
	_, runes := bytesToUnicode()
	if t.ignoreMerges {
		var sb strings.Builder
		for i := 0; i < len(piece); i++ {
			sb.WriteRune(runes[piece[i]])
		}
		if id, ok := t.vocab[sb.String()]; ok {
			return []int32{id}
		}
	}
	syms := make([]int32, len(piece))
	for i := 0; i < len(piece); i++ {
		syms[i] = t.byteID[piece[i]]
	}
	for len(syms) > 1 {
		best := mergeInfo{rank: -1}
		var bestA, bestB int32
		for i := 0; i+1 < len(syms); i++ {
			m, ok := t.merges[pairKey(syms[i], syms[i+1])]
			if ok && (best.rank < 0 || m.rank < best.rank) {
				best, bestA, bestB = m, syms[i], syms[i+1]
			}
		}
		if best.rank < 0 {
			break
		}
		w := 0
		for i := 0; i < len(syms); w++ {
			if i+1 < len(syms) && syms[i] == bestA && syms[i+1] == bestB {
				syms[w] = best.id
				i += 2
			} else {
				syms[w] = syms[i]
				i++
			}
		}
		syms = syms[:w]
	}
	return syms
}

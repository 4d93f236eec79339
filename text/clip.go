package text

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode"
)

// CLIP's special token ids in the standard 49,408-token vocabulary.
const (
	// CLIPBOS is the id of <|startoftext|>.
	CLIPBOS = 49406
	// CLIPEOS is the id of <|endoftext|>; SD 1.x also pads with it.
	CLIPEOS = 49407
	// CLIPMaxLength is the CLIP text encoder's context length (tokens per chunk, BOS and EOS included).
	CLIPMaxLength = 77
	// SD1PadID is the padding id of SD 1.x (OpenAI CLIP-L): the end-of-text token.
	SD1PadID = CLIPEOS
	// SD2PadID is the padding id of SD 2.x (OpenCLIP-H): zero.
	SD2PadID = 0
)

const (
	bosText = "<|startoftext|>"
	eosText = "<|endoftext|>"
	// endOfWord marks the last symbol of a pre-token, as CLIP's BPE does.
	endOfWord = "</w>"
	// maxCachedWords bounds the per-word BPE cache so that a stream of distinct words cannot grow it without
	// limit; when full it is simply cleared (prompts repeat few words, so a smarter policy buys nothing).
	maxCachedWords = 8192
)

// ErrTokenizer is returned (wrapped) when a tokenizer file is malformed.
var ErrTokenizer = errors.New("invalid tokenizer")

// clipPattern is CLIP's pre-tokenisation regex rewritten for RE2: the two special tokens, the English
// contractions, runs of letters, single digits, and runs of anything that is neither space, letter nor digit.
// Go's alternation is leftmost-first like Python's regex module, so the split is the same.
var clipPattern = regexp.MustCompile(`<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|\p{L}+|\p{N}|[^\s\p{L}\p{N}]+`)

// mergeInfo is one BPE merge: its rank (lower merges first) and the id of the merged symbol.
type mergeInfo struct {
	rank int32
	id   int32
}

// CLIPTokenizer is CLIP's byte-level BPE tokenizer. It is safe for concurrent use.
type CLIPTokenizer struct {
	vocab   map[string]int32
	decoder []string
	merges  map[uint64]mergeInfo
	// byteID and byteEndID are the ids of each byte's symbol, without and with the end-of-word mark.
	byteID    [256]int32
	byteEndID [256]int32
	bos, eos  int32
	unk       int32

	mu    sync.Mutex
	cache map[string][]int32
}

// bytesToUnicode returns CLIP's byte-to-unicode table in CLIP's order: the printable Latin-1 bytes map to
// themselves ('!'..'~', '¡'..'¬', '®'..'ÿ') and the other 68 bytes to U+0100 upwards, in byte order. The
// order matters: it is the order of the first 256 (and next 256) vocabulary ids.
func bytesToUnicode() (order [256]byte, runes [256]rune) {
	n := 0
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	for b := 0; b < 256; b++ {
		if printable(b) {
			order[n] = byte(b)
			runes[b] = rune(b)
			n++
		}
	}
	extra := 0
	for b := 0; b < 256; b++ {
		if !printable(b) {
			order[n] = byte(b)
			runes[b] = rune(256 + extra)
			extra++
			n++
		}
	}
	return order, runes
}

// pairKey packs two symbol ids into a merge-table key.
func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// newTokenizer builds a tokenizer from a vocabulary and ranked merges. source names the input in errors.
func newTokenizer(source string, vocab map[string]int32, merges [][2]string) (*CLIPTokenizer, error) {
	t := &CLIPTokenizer{vocab: vocab, merges: make(map[uint64]mergeInfo, len(merges)), cache: make(map[string][]int32)}
	maxID := int32(-1)
	for _, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("%s: %w: negative token id %d", source, ErrTokenizer, id)
		}
		maxID = max(maxID, id)
	}
	if maxID > 1<<24 {
		return nil, fmt.Errorf("%s: %w: token id %d is implausibly large", source, ErrTokenizer, maxID)
	}
	t.decoder = make([]string, maxID+1)
	for s, id := range vocab {
		t.decoder[id] = s
	}
	_, runes := bytesToUnicode()
	for b := 0; b < 256; b++ {
		s := string(runes[b])
		id, ok := vocab[s]
		if !ok {
			return nil, fmt.Errorf("%s: %w: byte symbol %q (byte 0x%02x) missing from the vocabulary", source, ErrTokenizer, s, b)
		}
		t.byteID[b] = id
		id, ok = vocab[s+endOfWord]
		if !ok {
			return nil, fmt.Errorf("%s: %w: byte symbol %q missing from the vocabulary", source, ErrTokenizer, s+endOfWord)
		}
		t.byteEndID[b] = id
	}
	var ok bool
	if t.bos, ok = vocab[bosText]; !ok {
		return nil, fmt.Errorf("%s: %w: %s missing from the vocabulary", source, ErrTokenizer, bosText)
	}
	if t.eos, ok = vocab[eosText]; !ok {
		return nil, fmt.Errorf("%s: %w: %s missing from the vocabulary", source, ErrTokenizer, eosText)
	}
	// CLIP's unknown token is the end-of-text token.
	t.unk = t.eos
	for i, m := range merges {
		a, okA := vocab[m[0]]
		b, okB := vocab[m[1]]
		c, okC := vocab[m[0]+m[1]]
		switch {
		case !okA:
			return nil, fmt.Errorf("%s: %w: merge %d (%q %q): %q is not in the vocabulary", source, ErrTokenizer, i+1, m[0], m[1], m[0])
		case !okB:
			return nil, fmt.Errorf("%s: %w: merge %d (%q %q): %q is not in the vocabulary", source, ErrTokenizer, i+1, m[0], m[1], m[1])
		case !okC:
			return nil, fmt.Errorf("%s: %w: merge %d (%q %q): %q is not in the vocabulary", source, ErrTokenizer, i+1, m[0], m[1], m[0]+m[1])
		}
		k := pairKey(a, b)
		if _, dup := t.merges[k]; dup {
			// CLIP's merges have no repeats; refuse them rather than guess which rank was meant.
			return nil, fmt.Errorf("%s: %w: merge %d (%q %q) repeats an earlier merge", source, ErrTokenizer, i+1, m[0], m[1])
		}
		t.merges[k] = mergeInfo{rank: int32(i), id: c}
	}
	return t, nil
}

// NewCLIPTokenizer builds a tokenizer from an explicit vocabulary (token string to id, as in vocab.json) and
// merges in rank order (first merges first, as in merges.txt). The vocabulary must contain the 512 byte
// symbols, every merge's parts and result, <|startoftext|> and <|endoftext|>.
func NewCLIPTokenizer(vocab map[string]int, merges [][2]string) (*CLIPTokenizer, error) {
	v := make(map[string]int32, len(vocab))
	for s, id := range vocab {
		if id < 0 || id > 1<<24 {
			return nil, fmt.Errorf("vocabulary: %w: token %q has id %d", ErrTokenizer, s, id)
		}
		v[s] = int32(id)
	}
	return newTokenizer("vocabulary", v, merges)
}

// NewCLIPTokenizerFromMerges builds CLIP's tokenizer from merges alone, with the vocabulary CLIP derives from
// them: the 256 byte symbols, the same with </w>, one token per merge, then <|startoftext|> and
// <|endoftext|>. With CLIP's 48,894 merges that gives the standard ids (BOS 49406, EOS 49407).
func NewCLIPTokenizerFromMerges(merges [][2]string) (*CLIPTokenizer, error) {
	order, runes := bytesToUnicode()
	vocab := make(map[string]int32, 512+len(merges)+2)
	next := int32(0)
	add := func(s string) {
		// A token that appears twice (possible only in a hand-made merges list) keeps its last id, as
		// CLIP's dict(zip(vocab, range(len(vocab)))) does.
		vocab[s] = next
		next++
	}
	for _, b := range order {
		add(string(runes[b]))
	}
	for _, b := range order {
		add(string(runes[b]) + endOfWord)
	}
	for _, m := range merges {
		add(m[0] + m[1])
	}
	add(bosText)
	add(eosText)
	return newTokenizer("merges", vocab, merges)
}

// ParseMerges parses merges text (merges.txt): an optional "#version" first line, then one "left right"
// pair per line. Empty lines are skipped. source names the input in errors.
func ParseMerges(source string, text string) ([][2]string, error) {
	lines := strings.Split(text, "\n")
	merges := make([][2]string, 0, len(lines))
	for i, line := range lines {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || (i == 0 && strings.HasPrefix(line, "#version")) {
			continue
		}
		left, right, ok := strings.Cut(line, " ")
		if !ok || left == "" || right == "" || strings.Contains(right, " ") {
			return nil, fmt.Errorf("%s: line %d: %w: merge %q is not two symbols separated by one space", source, i+1, ErrTokenizer, line)
		}
		merges = append(merges, [2]string{left, right})
	}
	if len(merges) == 0 {
		return nil, fmt.Errorf("%s: %w: no merges", source, ErrTokenizer)
	}
	return merges, nil
}

// BOS returns the id of <|startoftext|>.
func (t *CLIPTokenizer) BOS() int { return int(t.bos) }

// EOS returns the id of <|endoftext|>.
func (t *CLIPTokenizer) EOS() int { return int(t.eos) }

// VocabSize returns the number of ids (one more than the largest id).
func (t *CLIPTokenizer) VocabSize() int { return len(t.decoder) }

// Token returns the vocabulary string of id ("" when id is out of range).
func (t *CLIPTokenizer) Token(id int) string {
	if id < 0 || id >= len(t.decoder) {
		return ""
	}
	return t.decoder[id]
}

// ID returns the id of a vocabulary string.
func (t *CLIPTokenizer) ID(token string) (int, bool) {
	id, ok := t.vocab[token]
	return int(id), ok
}

// isCLIPSpace reports the characters Python's str.isspace() accepts (which CLIP's whitespace_clean
// collapses): Unicode white space plus the ASCII separators 0x1c..0x1f.
func isCLIPSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// CleanText applies CLIP's text cleaning: every run of white space becomes one space, the ends are trimmed,
// and the text is lower-cased. Unlike OpenAI's reference it does not run ftfy or HTML unescaping (neither
// stable-diffusion.cpp nor Hugging Face's fast tokenizer does), and lower-casing is Unicode-aware like
// Python's str.lower (stable-diffusion.cpp lower-cases ASCII only).
func CleanText(text string) string {
	var b strings.Builder
	b.Grow(len(text))
	space := false
	for _, r := range text {
		if isCLIPSpace(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}

// Encode returns the BPE ids of text, without BOS, EOS or padding. The special tokens written literally in
// the text ("<|endoftext|>") map to their ids.
func (t *CLIPTokenizer) Encode(text string) []int {
	return t.appendEncode(nil, text)
}

// appendEncode appends the ids of text to dst.
func (t *CLIPTokenizer) appendEncode(dst []int, text string) []int {
	text = CleanText(text)
	for _, loc := range clipPattern.FindAllStringIndex(text, -1) {
		word := text[loc[0]:loc[1]]
		switch word {
		case bosText:
			dst = append(dst, int(t.bos))
			continue
		case eosText:
			dst = append(dst, int(t.eos))
			continue
		}
		for _, id := range t.bpe(word) {
			dst = append(dst, int(id))
		}
	}
	return dst
}

// EncodePadded returns BOS, the ids of text and EOS, truncated and padded to maxLen as CLIP does: a text
// too long keeps its first maxLen-2 ids and still ends with EOS; a shorter one is padded with padID
// (SD1PadID for SD 1.x, SD2PadID for SD 2.x). maxLen <= 0 means no truncation and no padding; maxLen is
// raised to 2 when smaller, so BOS and EOS always fit.
func (t *CLIPTokenizer) EncodePadded(text string, maxLen, padID int) []int {
	ids := t.appendEncode([]int{int(t.bos)}, text)
	if maxLen <= 0 {
		return append(ids, int(t.eos))
	}
	maxLen = max(maxLen, 2)
	if len(ids) > maxLen-1 {
		ids = ids[:maxLen-1]
	}
	ids = append(ids, int(t.eos))
	for len(ids) < maxLen {
		ids = append(ids, padID)
	}
	return ids
}

// bpe returns the ids of one pre-token (a regex match), from the cache when it has been seen.
func (t *CLIPTokenizer) bpe(word string) []int32 {
	t.mu.Lock()
	ids, ok := t.cache[word]
	t.mu.Unlock()
	if ok {
		return ids
	}
	ids = t.bpeUncached(word, make([]int32, 0, len(word)))
	t.mu.Lock()
	if len(t.cache) >= maxCachedWords {
		clear(t.cache)
	}
	t.cache[word] = ids
	t.mu.Unlock()
	return ids
}

// bpeUncached runs byte-pair encoding on word's bytes: start from one symbol per byte (the last marked
// end-of-word), then repeatedly merge every occurrence of the adjacent pair with the lowest merge rank,
// left to right, until no adjacent pair has a merge. This is CLIP's loop, on ids instead of strings.
func (t *CLIPTokenizer) bpeUncached(word string, syms []int32) []int32 {
	n := len(word)
	if n == 0 {
		return syms
	}
	for i := 0; i < n-1; i++ {
		syms = append(syms, t.byteID[word[i]])
	}
	syms = append(syms, t.byteEndID[word[n-1]])
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
		// Merge in place: w is the write index.
		w := 0
		for i := 0; i < len(syms); {
			if i+1 < len(syms) && syms[i] == bestA && syms[i+1] == bestB {
				syms[w] = best.id
				i += 2
			} else {
				syms[w] = syms[i]
				i++
			}
			w++
		}
		syms = syms[:w]
	}
	return syms
}

// Decode turns ids back into text the way CLIP's decoder does: special tokens are dropped, </w> becomes a
// space, and the byte symbols are mapped back to bytes.
func (t *CLIPTokenizer) Decode(ids []int) string {
	_, runes := bytesToUnicode()
	inv := make(map[rune]byte, 256)
	for b := 0; b < 256; b++ {
		inv[runes[b]] = byte(b)
	}
	var out []byte
	for _, id := range ids {
		if id == int(t.bos) || id == int(t.eos) || id < 0 || id >= len(t.decoder) {
			continue
		}
		s := t.decoder[id]
		eow := strings.HasSuffix(s, endOfWord)
		s = strings.TrimSuffix(s, endOfWord)
		for _, r := range s {
			if b, ok := inv[r]; ok {
				out = append(out, b)
			}
		}
		if eow {
			out = append(out, ' ')
		}
	}
	return strings.TrimSpace(string(out))
}

package text

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"
)

// PieceType is the kind of a vocabulary piece, numbered as SentencePiece's ModelProto.SentencePiece.Type
// and llama.cpp's tokenizer.ggml.token_type both number them.
type PieceType int32

// The piece types.
const (
	// PieceNormal is an ordinary piece that segmentation may produce.
	PieceNormal PieceType = 1
	// PieceUnknown is the one unknown piece (<unk>) that stands for characters no piece covers.
	PieceUnknown PieceType = 2
	// PieceControl is a control symbol (<pad>, </s>, <extra_id_0>): never produced from text.
	PieceControl PieceType = 3
	// PieceUserDefined is a symbol always cut out of the text as a whole, before normalization.
	PieceUserDefined PieceType = 4
	// PieceUnused is a piece kept in the vocabulary but never produced.
	PieceUnused PieceType = 5
	// PieceByte is one of the 256 byte pieces <0x00>..<0xFF> that byte fallback spells unknown text with.
	PieceByte PieceType = 6
)

// String returns SentencePiece's name of the type ("NORMAL", "CONTROL").
func (p PieceType) String() string {
	switch p {
	case PieceNormal:
		return "NORMAL"
	case PieceUnknown:
		return "UNKNOWN"
	case PieceControl:
		return "CONTROL"
	case PieceUserDefined:
		return "USER_DEFINED"
	case PieceUnused:
		return "UNUSED"
	case PieceByte:
		return "BYTE"
	}
	return fmt.Sprintf("PieceType(%d)", int32(p))
}

// UnigramPiece is one vocabulary entry; its id is its index in UnigramSpec.Pieces.
type UnigramPiece struct {
	// Text is the piece as stored, with U+2581 (▁) standing for a space when the model escapes whitespace.
	Text string
	// Score is the piece's log probability; segmentation maximizes the sum of scores.
	Score float32
	// Type is the piece's kind.
	Type PieceType
}

// UnigramSpec is everything that defines a unigram tokenizer: SentencePiece's ModelProto reduced to what
// encoding reads, plus the special tokens that the model's post-processing adds. NewUnigramTokenizer builds
// a tokenizer from it and UnigramTokenizer.Spec gives it back, so every reader and writer meets here.
type UnigramSpec struct {
	// Pieces is the vocabulary in id order.
	Pieces []UnigramPiece
	// UnkID is the id of the unknown piece (required; its type must be PieceUnknown).
	UnkID int32
	// BOSID, EOSID and PadID are the ids of <s>, </s> and <pad>, or -1 when the model has none.
	BOSID, EOSID, PadID int32
	// AddBOS and AddEOS say whether Encode puts BOSID before and EOSID after the pieces (T5: EOS only).
	AddBOS, AddEOS bool
	// PrecompiledCharsMap is the normalization rule compiled by SentencePiece; empty means no
	// normalization beyond the whitespace handling below.
	PrecompiledCharsMap []byte
	// AddDummyPrefix puts a space before the text, so that the first word gets its "▁word" piece.
	AddDummyPrefix bool
	// RemoveExtraWhitespaces drops leading and trailing whitespace and collapses runs of it into one.
	RemoveExtraWhitespaces bool
	// EscapeWhitespaces writes spaces as U+2581 (▁), as the pieces store them.
	EscapeWhitespaces bool
	// TreatWhitespaceAsSuffix puts the dummy space after the text instead of before it.
	TreatWhitespaceAsSuffix bool
	// ByteFallback spells characters that no piece covers with the byte pieces instead of <unk>.
	ByteFallback bool
}

// ErrUnigram is returned (wrapped) when a unigram tokenizer file or specification is malformed.
var ErrUnigram = errors.New("invalid unigram tokenizer")

// ErrNoUnigramTokenizer is returned (wrapped) when model metadata carries no unigram tokenizer.
var ErrNoUnigramTokenizer = errors.New("no unigram tokenizer in the model metadata")

// spmSpace is U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
const spmSpace = "\u2581"

// unkPenalty is what SentencePiece subtracts from the lowest piece score to score an unknown character.
const unkPenalty = 10

// UnigramTokenizer is a SentencePiece unigram tokenizer (T5, UMT5, mT5 and the like): normalization by the
// model's precompiled charsmap, SentencePiece's whitespace rules, and the segmentation that maximizes the
// sum of piece scores. It is immutable and safe for concurrent use.
type UnigramTokenizer struct {
	spec UnigramSpec
	// trie holds the pieces segmentation may produce (normal and user-defined).
	trie ugTrie
	// userDefined groups the user-defined pieces by first byte for the normalizer's prefix match; nil when
	// the model has none.
	userDefined *[256][]string
	charsMap    *spmCharsMap
	// minScore and maxScore range over the normal pieces, starting from C's FLT_MAX and FLT_MIN as
	// SentencePiece starts them (FLT_MIN is the smallest positive normal float, not the most negative).
	minScore, maxScore float32
	unkScore           float32
	byteID             [256]int32
}

// NewUnigramTokenizer checks spec as SentencePiece checks a model (non-empty pieces, no duplicates, one
// unknown piece, all 256 byte pieces when byte fallback is on and none when it is off; sdtool also wants
// every piece to be valid UTF-8) and builds the tokenizer. The tokenizer keeps its own copy of the vocabulary.
func NewUnigramTokenizer(spec UnigramSpec) (*UnigramTokenizer, error) {
	n := len(spec.Pieces)
	if n == 0 {
		return nil, fmt.Errorf("%w: no pieces", ErrUnigram)
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d pieces is more than int32 ids can number", ErrUnigram, n)
	}
	spec.Pieces = append([]UnigramPiece(nil), spec.Pieces...)
	spec.PrecompiledCharsMap = append([]byte(nil), spec.PrecompiledCharsMap...)
	t := &UnigramTokenizer{spec: spec}
	t.minScore, t.maxScore = math.MaxFloat32, 0x1p-126
	for i := range t.byteID {
		t.byteID[i] = -1
	}
	matchIDs, unk, bytes, err := t.indexPieces()
	if err != nil {
		return nil, err
	}
	if err := checkSpecials(&spec, unk, bytes); err != nil {
		return nil, err
	}
	if len(spec.PrecompiledCharsMap) > 0 {
		cm, err := parseCharsMap(spec.PrecompiledCharsMap)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnigram, err)
		}
		t.charsMap = cm
	}
	t.unkScore = t.minScore - unkPenalty
	t.trie = buildUGTrie(t.spec.Pieces, matchIDs)
	if t.userDefined != nil {
		for _, l := range t.userDefined {
			// Longest first, so that the first match is the longest, as SentencePiece's prefix matcher takes.
			sort.Slice(l, func(a, b int) bool { return len(l[a]) > len(l[b]) })
		}
	}
	return t, nil
}

// indexPieces checks every piece (text, type, no repeats among the
// matchable ones nor among the reserved ones) and indexes them: the ids
// the trie matches, user-defined pieces by first byte, byte pieces by
// value, the score range; it returns the matchable ids, the UNKNOWN
// piece's id and the number of byte pieces.
func (t *UnigramTokenizer) indexPieces() (matchIDs []int32, unk, bytes int, err error) {
	pieces := t.spec.Pieces
	matchable := make(map[string]int, len(pieces))
	reserved := map[string]int{}
	unk = -1
	for i, p := range pieces {
		if p.Text == "" {
			return nil, 0, 0, fmt.Errorf("%w: piece %d is empty", ErrUnigram, i)
		}
		if !utf8.ValidString(p.Text) {
			// Normalized text is valid UTF-8, so such a piece could only match raw invalid input.
			return nil, 0, 0, fmt.Errorf("%w: piece %d (%q) is not valid UTF-8", ErrUnigram, i, p.Text)
		}
		seen := reserved
		switch p.Type {
		case PieceNormal, PieceUserDefined, PieceUnused:
			seen = matchable
		case PieceUnknown, PieceControl, PieceByte:
		default:
			return nil, 0, 0, fmt.Errorf("%w: piece %d (%q) has type %d, not one of 1..6", ErrUnigram, i, p.Text, int32(p.Type))
		}
		if j, dup := seen[p.Text]; dup {
			return nil, 0, 0, fmt.Errorf("%w: piece %d (%q) repeats piece %d", ErrUnigram, i, p.Text, j)
		}
		seen[p.Text] = i
		switch p.Type {
		case PieceNormal:
			t.minScore = min(t.minScore, p.Score)
			t.maxScore = max(t.maxScore, p.Score)
			matchIDs = append(matchIDs, int32(i))
		case PieceUserDefined:
			matchIDs = append(matchIDs, int32(i))
			if t.userDefined == nil {
				t.userDefined = new([256][]string)
			}
			t.userDefined[p.Text[0]] = append(t.userDefined[p.Text[0]], p.Text)
		case PieceUnknown:
			if unk >= 0 {
				return nil, 0, 0, fmt.Errorf("%w: pieces %d and %d are both of type UNKNOWN", ErrUnigram, unk, i)
			}
			unk = i
		case PieceByte:
			b, ok := parseBytePiece(p.Text)
			if !ok {
				return nil, 0, 0, fmt.Errorf("%w: byte piece %d is %q, not <0x00>..<0xFF>", ErrUnigram, i, p.Text)
			}
			t.byteID[b] = int32(i)
			bytes++
		}
	}
	return matchIDs, unk, bytes, nil
}

// checkSpecials checks the spec's special ids against its pieces: the
// UNKNOWN piece (at unk) is the unknown id, byte fallback has all 256 byte
// pieces (bytes) or none, and the BOS, EOS and padding ids are in range,
// present when added.
func checkSpecials(spec *UnigramSpec, unk, bytes int) error {
	n := len(spec.Pieces)
	if unk < 0 {
		return fmt.Errorf("%w: no piece of type UNKNOWN", ErrUnigram)
	}
	if spec.UnkID != int32(unk) {
		return fmt.Errorf("%w: unknown id %d, but the UNKNOWN piece is %d (%q)", ErrUnigram, spec.UnkID, unk, spec.Pieces[unk].Text)
	}
	if bytes > 0 && !spec.ByteFallback {
		return fmt.Errorf("%w: %d byte pieces although byte fallback is off", ErrUnigram, bytes)
	}
	if spec.ByteFallback && bytes != 256 {
		return fmt.Errorf("%w: byte fallback is on but %d of the 256 byte pieces exist", ErrUnigram, bytes)
	}
	for _, s := range []struct {
		name string
		id   int32
		add  bool
	}{{"BOS", spec.BOSID, spec.AddBOS}, {"EOS", spec.EOSID, spec.AddEOS}, {"padding", spec.PadID, false}} {
		if s.id < -1 || s.id >= int32(n) {
			return fmt.Errorf("%w: %s id %d outside the %d pieces", ErrUnigram, s.name, s.id, n)
		}
		if s.add && s.id < 0 {
			return fmt.Errorf("%w: adding %s is asked for but the model has no %s piece", ErrUnigram, s.name, s.name)
		}
	}
	return nil
}

// parseBytePiece reads a byte piece's text, <0xXX> with two upper-case hex digits as SentencePiece
// writes them.
func parseBytePiece(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(s[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

// Spec returns a copy of the tokenizer's definition.
func (t *UnigramTokenizer) Spec() UnigramSpec {
	s := t.spec
	s.Pieces = append([]UnigramPiece(nil), s.Pieces...)
	s.PrecompiledCharsMap = append([]byte(nil), s.PrecompiledCharsMap...)
	return s
}

// VocabSize returns the number of pieces.
func (t *UnigramTokenizer) VocabSize() int { return len(t.spec.Pieces) }

// Piece returns the text of piece id, or "" when id is out of range.
func (t *UnigramTokenizer) Piece(id int32) string {
	if id < 0 || int(id) >= len(t.spec.Pieces) {
		return ""
	}
	return t.spec.Pieces[id].Text
}

// UnkID returns the id of the unknown piece.
func (t *UnigramTokenizer) UnkID() int32 { return t.spec.UnkID }

// EOSID returns the id of </s>, or -1 when the model has none.
func (t *UnigramTokenizer) EOSID() int32 { return t.spec.EOSID }

// BOSID returns the id of <s>, or -1 when the model has none.
func (t *UnigramTokenizer) BOSID() int32 { return t.spec.BOSID }

// PadID returns the id of <pad>, or -1 when the model has none.
func (t *UnigramTokenizer) PadID() int32 { return t.spec.PadID }

// Encode returns the token ids of text with the model's special tokens: BOS first when AddBOS is set,
// the pieces, then EOS when AddEOS is set (T5: the pieces and </s>, so "" gives just [1]).
func (t *UnigramTokenizer) Encode(text string) []int32 {
	ids, _ := t.Segment(text)
	out := make([]int32, 0, len(ids)+2)
	if t.spec.AddBOS {
		out = append(out, t.spec.BOSID)
	}
	out = append(out, ids...)
	if t.spec.AddEOS {
		out = append(out, t.spec.EOSID)
	}
	return out
}

// Tokenize returns the piece ids of text without special tokens.
func (t *UnigramTokenizer) Tokenize(text string) []int32 {
	ids, _ := t.Segment(text)
	return ids
}

// Segment normalizes text and returns its best segmentation: the piece ids and, for each, the normalized
// text it covers. As SentencePiece does, consecutive unknown pieces are merged into one <unk>, and with
// byte fallback each unknown piece becomes the byte pieces of its UTF-8 bytes (their texts are the
// <0xXX> piece names).
func (t *UnigramTokenizer) Segment(text string) ([]int32, []string) {
	return t.segment(t.Normalize(text))
}

// ugBest is the best path that ends at one byte position of the normalized text.
type ugBest struct {
	score float32
	start int32 // where its last piece starts; -1 while no path reaches the position
	id    int32
}

// segment runs SentencePiece's Viterbi search over the normalized text, working on byte positions and
// starting pieces only at character boundaries. The arithmetic copies SentencePiece's types, so that ties
// and near-ties fall the same way: a piece's candidate score is computed in double precision from float
// scores and compared with the stored float, while the unknown candidate is a float sum.
func (t *UnigramTokenizer) segment(norm string) ([]int32, []string) {
	n := len(norm)
	if n == 0 {
		return nil, nil
	}
	best := make([]ugBest, n+1)
	for i := range best {
		best[i].start = -1
	}
	pieces := t.spec.Pieces
	for s := 0; s < n; {
		till := best[s].score
		mblen := min(spmCharLen(norm[s]), n-s)
		single := false
		node := int32(0)
		for k := s; k < n; k++ {
			if node = t.trie.step(node, norm[k]); node < 0 {
				break
			}
			id := t.trie.nodes[node].id
			if id < 0 {
				continue
			}
			p := &pieces[id]
			length := k - s + 1 // the node's depth, the piece's length
			var cand float64
			if p.Type == PieceUserDefined {
				// User-defined symbols get a bonus that makes them win over any segmentation.
				cand = float64(float32(length)*t.maxScore) - 0.1 + float64(till)
			} else {
				cand = float64(p.Score) + float64(till)
			}
			if tgt := &best[k+1]; tgt.start < 0 || cand > float64(tgt.score) {
				tgt.score, tgt.start, tgt.id = float32(cand), int32(s), id
			}
			if length == mblen {
				single = true
			}
		}
		if !single {
			cand := t.unkScore + till
			if tgt := &best[s+mblen]; tgt.start < 0 || cand > tgt.score {
				tgt.score, tgt.start, tgt.id = cand, int32(s), t.spec.UnkID
			}
		}
		s += mblen
	}
	var ids []int32
	var texts []string
	for end := n; end > 0; end = int(best[end].start) {
		ids = append(ids, best[end].id)
		texts = append(texts, norm[best[end].start:end])
	}
	for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
		texts[i], texts[j] = texts[j], texts[i]
	}
	return t.postprocessUnknown(ids, texts)
}

// postprocessUnknown applies what SentencePiece's processor does to the model's output: merge runs of
// unknown pieces, or spell each with byte pieces under byte fallback.
func (t *UnigramTokenizer) postprocessUnknown(ids []int32, texts []string) ([]int32, []string) {
	unk := t.spec.UnkID
	outIDs, outTexts := ids[:0:0], texts[:0:0]
	prevUnk := false
	for i, id := range ids {
		isUnk := id == unk
		switch {
		case isUnk && t.spec.ByteFallback:
			for _, b := range []byte(texts[i]) {
				bid := t.byteID[b]
				outIDs = append(outIDs, bid)
				outTexts = append(outTexts, t.spec.Pieces[bid].Text)
			}
		case isUnk && prevUnk:
			outTexts[len(outTexts)-1] += texts[i]
		default:
			outIDs = append(outIDs, id)
			outTexts = append(outTexts, texts[i])
		}
		prevUnk = isUnk
	}
	return outIDs, outTexts
}

// ugTrie is a byte trie of piece texts: each node lists its children's labels in ascending order in one
// run of labels and child, so a step is a search among at most 256 bytes, and the root's children are also
// indexed directly by byte.
type ugTrie struct {
	nodes    []ugTrieNode
	labels   []byte
	children []int32
	root     [256]int32
}

// ugTrieNode is one trie node: its children are labels[first:first+n], and id is the piece that ends
// here, or -1.
type ugTrieNode struct {
	first, n, id int32
}

// buildUGTrie builds the trie of the pieces ids.
func buildUGTrie(pieces []UnigramPiece, ids []int32) ugTrie {
	ids = append([]int32(nil), ids...)
	sort.Slice(ids, func(a, b int) bool { return pieces[ids[a]].Text < pieces[ids[b]].Text })
	var t ugTrie
	// Pieces sorted by bytes share each prefix over one run, so a node is built from the run of the pieces
	// that start with its prefix: the piece equal to the prefix (first in the run) ends there, and the rest
	// split into one child per next byte. The explicit stack keeps long pieces from deepening the Go stack.
	type job struct{ node, lo, hi, depth int32 }
	t.nodes = append(t.nodes, ugTrieNode{id: -1})
	stack := []job{{0, 0, int32(len(ids)), 0}}
	for len(stack) > 0 {
		j := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		lo := j.lo
		if lo < j.hi && int32(len(pieces[ids[lo]].Text)) == j.depth {
			t.nodes[j.node].id = ids[lo]
			lo++
		}
		first := int32(len(t.labels))
		for i := lo; i < j.hi; {
			c := pieces[ids[i]].Text[j.depth]
			e := i
			for e < j.hi && pieces[ids[e]].Text[j.depth] == c {
				e++
			}
			child := int32(len(t.nodes))
			t.nodes = append(t.nodes, ugTrieNode{id: -1})
			t.labels = append(t.labels, c)
			t.children = append(t.children, child)
			stack = append(stack, job{child, i, e, j.depth + 1})
			i = e
		}
		t.nodes[j.node].first, t.nodes[j.node].n = first, int32(len(t.labels))-first
	}
	for c := range t.root {
		t.root[c] = -1
	}
	r := t.nodes[0]
	for i := r.first; i < r.first+r.n; i++ {
		t.root[t.labels[i]] = t.children[i]
	}
	return t
}

// step returns the child of node for byte c, or -1.
func (t *ugTrie) step(node int32, c byte) int32 {
	if node == 0 {
		return t.root[c]
	}
	nd := t.nodes[node]
	labels := t.labels[nd.first : nd.first+nd.n]
	lo, hi := 0, len(labels)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if labels[m] < c {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(labels) && labels[lo] == c {
		return t.children[int(nd.first)+lo]
	}
	return -1
}

// spmCharLen is SentencePiece's length of the UTF-8 character starting with byte b, taken from the lead
// byte alone (a stray continuation byte counts as one). Normalized text is valid UTF-8, so it is exact
// there.
func spmCharLen(b byte) int {
	switch {
	case b < 0xC0:
		return 1
	case b < 0xE0:
		return 2
	case b < 0xF0:
		return 3
	}
	return 4
}

// Normalize returns text as the model sees it before segmentation: user-defined symbols kept as they are,
// everything else rewritten by the precompiled charsmap (longest matching rule first; bytes that are not
// valid UTF-8 become U+FFFD), whitespace trimmed and collapsed when RemoveExtraWhitespaces is set, a dummy
// space added before (or, with TreatWhitespaceAsSuffix, after) the text, and spaces written as ▁ when
// EscapeWhitespaces is set. It follows SentencePiece's normalizer step by step.
func (t *UnigramTokenizer) Normalize(text string) string {
	if text == "" {
		return ""
	}
	sp := &t.spec
	if sp.RemoveExtraWhitespaces {
		for text != "" {
			r, n := t.normalizePrefix(text)
			if r != " " {
				break
			}
			text = text[n:]
		}
		if text == "" {
			return ""
		}
	}
	space := " "
	if sp.EscapeWhitespaces {
		space = spmSpace
	}
	var b strings.Builder
	b.Grow(len(text) * 3 / 2)
	if sp.AddDummyPrefix && !sp.TreatWhitespaceAsSuffix {
		b.WriteString(space)
	}
	prevSpace := sp.RemoveExtraWhitespaces
	for text != "" {
		r, n := t.normalizePrefix(text)
		text = text[n:]
		for prevSpace && strings.HasPrefix(r, " ") {
			r = r[1:]
		}
		if r != "" {
			if sp.EscapeWhitespaces {
				b.WriteString(strings.ReplaceAll(r, " ", spmSpace))
			} else {
				b.WriteString(r)
			}
			prevSpace = strings.HasSuffix(r, " ")
		}
		if !sp.RemoveExtraWhitespaces {
			prevSpace = false
		}
	}
	out := b.String()
	if sp.RemoveExtraWhitespaces {
		for strings.HasSuffix(out, space) {
			out = out[:len(out)-len(space)]
		}
	}
	if sp.AddDummyPrefix && sp.TreatWhitespaceAsSuffix {
		out += space
	}
	return out
}

// normalizePrefix rewrites the start of s: a user-defined symbol stays as it is, else the longest rule of
// the charsmap applies, else one character passes unchanged (one invalid byte becomes U+FFFD). It returns
// the replacement and how many bytes of s it consumed.
func (t *UnigramTokenizer) normalizePrefix(s string) (string, int) {
	if t.userDefined != nil {
		for _, u := range t.userDefined[s[0]] {
			if strings.HasPrefix(s, u) {
				return u, len(u)
			}
		}
	}
	if t.charsMap != nil {
		if r, n := t.charsMap.longestPrefix(s); n > 0 {
			return r, n
		}
	}
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n == 1 {
		return "\uFFFD", 1
	}
	return s[:n], n
}

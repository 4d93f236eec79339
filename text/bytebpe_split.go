package text

import "unicode"

// Pre-tokenizers of byte-level BPE vocabularies, named as llama.cpp's
// tokenizer.ggml.pre names them.
const (
	// PreQwen2 is the split of Qwen2, Qwen2.5 and Qwen3 (PreQwen2Regex).
	PreQwen2 = "qwen2"
)

// PreQwen2Regex is the split pattern of Qwen's tokenizer.json, by which a
// vocabulary read from one is recognised as Qwen's. Go's regexp has no
// lookahead, so splitQwen2 implements it by hand.
const PreQwen2Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// splitQwen2 splits s into the pieces PreQwen2Regex matches, left to
// right, each alternative tried in the pattern's order as a backtracking
// regex engine does; the pieces cover s exactly. \s is Unicode White_Space
// (unicode.IsSpace), \p{L} and \p{N} Unicode letters and numbers.
func splitQwen2(s string) []string {
	rs := []rune(s)
	var out []string
	for i := 0; i < len(rs); {
		n := qwen2Match(rs, i)
		out = append(out, string(rs[i:i+n]))
		i += n
	}
	return out
}

// qwen2Match returns the length in runes of the pattern's match at rs[i:]
// (at least 1: the last alternative, \s+, and the punctuation one cover
// every rune the others do not).
func qwen2Match(rs []rune, i int) int {
	if n := contraction(rs, i); n > 0 {
		return n
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if j := i; j < len(rs) {
		if !isLetter(rs[j]) && !isNumber(rs[j]) && !isNewline(rs[j]) && j+1 < len(rs) && isLetter(rs[j+1]) {
			j++
		}
		if isLetter(rs[j]) {
			for j < len(rs) && isLetter(rs[j]) {
				j++
			}
			return j - i
		}
	}
	// \p{N}
	if isNumber(rs[i]) {
		return 1
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if rs[j] == ' ' && j+1 < len(rs) && isPunct(rs[j+1]) {
		j++
	}
	if isPunct(rs[j]) {
		for j < len(rs) && isPunct(rs[j]) {
			j++
		}
		for j < len(rs) && isNewline(rs[j]) {
			j++
		}
		return j - i
	}
	// The rest start with whitespace: rs[i] is neither letter, number
	// nor punctuation (a space before a letter was taken above).
	return whitespaceMatch(rs, i)
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at rs[i:], returning
// its length or 0.
func contraction(rs []rune, i int) int {
	if rs[i] != '\'' || i+1 >= len(rs) {
		return 0
	}
	a := unicode.ToLower(rs[i+1])
	switch a {
	case 's', 't', 'm', 'd':
		return 2
	}
	if i+2 >= len(rs) {
		return 0
	}
	switch b := unicode.ToLower(rs[i+2]); {
	case a == 'r' && b == 'e', a == 'v' && b == 'e', a == 'l' && b == 'l':
		return 3
	}
	return 0
}

func isLetter(r rune) bool  { return unicode.IsLetter(r) }
func isNumber(r rune) bool  { return unicode.IsNumber(r) }
func isNewline(r rune) bool { return r == '\r' || r == '\n' }

// isPunct is [^\s\p{L}\p{N}].
func isPunct(r rune) bool { return !unicode.IsSpace(r) && !isLetter(r) && !isNumber(r) }

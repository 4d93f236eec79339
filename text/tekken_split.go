package text

import "unicode"

// PreTekken is the split of Mistral's Tekken vocabularies (Mistral Nemo,
// Mistral Small 3.x, Ministral: PreTekkenRegex), as llama.cpp's
// tokenizer.ggml.pre names it.
const PreTekken = "tekken"

// PreTekkenRegex is Tekken's split pattern (tekken.json's config.pattern and
// the Split of Mistral's tokenizer.json). Unlike Qwen's it has no
// contractions, keeps a word's leading capitals with it (CamelCase splits
// into Camel and Case) and lets a run of punctuation take the slashes and
// newlines after it. splitTekken implements it by hand, since Go's regexp
// has no lookahead.
const PreTekkenRegex = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// tekkenUpper is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]: the runes that may open a word.
func tekkenUpper(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

// tekkenLower is [\p{Ll}\p{Lm}\p{Lo}\p{M}]: the runes that continue one.
func tekkenLower(r rune) bool {
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

// tekkenPrefix is [^\r\n\p{L}\p{N}], the optional rune before a word.
func tekkenPrefix(r rune) bool { return !isLetter(r) && !isNumber(r) && !isNewline(r) }

// splitTekken splits s into the pieces PreTekkenRegex matches, left to
// right, each alternative tried in the pattern's order with the
// backtracking of a regex engine; the pieces cover s exactly.
func splitTekken(s string) []string {
	rs := []rune(s)
	var out []string
	for i := 0; i < len(rs); {
		n := tekkenMatch(rs, i)
		out = append(out, string(rs[i:i+n]))
		i += n
	}
	return out
}

// tekkenMatch returns the length in runes of the pattern's match at rs[i:]
// (at least 1).
func tekkenMatch(rs []rune, i int) int {
	for _, word := range []func([]rune, int) int{tekkenLowerWord, tekkenUpperWord} {
		if tekkenPrefix(rs[i]) && i+1 < len(rs) {
			if e := word(rs, i+1); e > 0 {
				return e - i
			}
		}
		if e := word(rs, i); e > 0 {
			return e - i
		}
	}
	if isNumber(rs[i]) {
		return 1
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
	j := i
	if rs[j] == ' ' && j+1 < len(rs) && isPunct(rs[j+1]) {
		j++
	}
	if isPunct(rs[j]) {
		for j < len(rs) && isPunct(rs[j]) {
			j++
		}
		for j < len(rs) && (isNewline(rs[j]) || rs[j] == '/') {
			j++
		}
		return j - i
	}
	return whitespaceMatch(rs, i)
}

// tekkenLowerWord matches [U]*[L]+ at rs[j:] and returns its end, or 0:
// the capitals run greedily and give runes back until a lower-class rune
// can follow.
func tekkenLowerWord(rs []rune, j int) int {
	k := j
	for k < len(rs) && tekkenUpper(rs[k]) {
		k++
	}
	for e := k; e >= j; e-- {
		if e < len(rs) && tekkenLower(rs[e]) {
			m := e
			for m < len(rs) && tekkenLower(rs[m]) {
				m++
			}
			return m
		}
	}
	return 0
}

// tekkenUpperWord matches [U]+[L]* at rs[j:] and returns its end, or 0.
func tekkenUpperWord(rs []rune, j int) int {
	k := j
	for k < len(rs) && tekkenUpper(rs[k]) {
		k++
	}
	if k == j {
		return 0
	}
	for k < len(rs) && tekkenLower(rs[k]) {
		k++
	}
	return k
}

// whitespaceMatch is the pattern's whitespace alternatives at rs[i:]
// (\s*[\r\n]+, \s+(?!\S), \s+), which Qwen's and Tekken's share; rs[i] is
// neither letter, number nor punctuation.
func whitespaceMatch(rs []rune, i int) int {
	end := i
	for end < len(rs) && unicode.IsSpace(rs[end]) {
		end++
	}
	// \s*[\r\n]+: up to the run's last newline.
	for k := end - 1; k >= i; k-- {
		if isNewline(rs[k]) {
			return k + 1 - i
		}
	}
	// \s+(?!\S): the run, less its last rune when a non-space follows.
	if end == len(rs) {
		return end - i
	}
	if end-1 > i {
		return end - 1 - i
	}
	if end == i {
		return 1 // not reached: every rune is a letter, number, punctuation or space
	}
	return end - i
}

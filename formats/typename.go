package formats

import (
	"fmt"
	"slices"
	"strings"
)

// LookupType is the one parser of a tensor type name that every command
// uses (convert's --type and rules, quantize's rules, merge's --type): the
// name as ggml spells it ("q4_K", "iq4_xs"), or any other capitalisation of
// it ("Q8_0", "Q4_K"), since no two ggml names differ only in case. An
// unknown name gets UnknownType's error, which suggests the nearest name.
func LookupType(name string) (DType, error) {
	if t, ok := ParseType(name); ok {
		return t, nil
	}
	return 0, UnknownType(name, sortedNames)
}

// TypeNames returns every type name as ggml spells it, sorted.
func TypeNames() []string { return slices.Clone(sortedNames) }

// UnknownType is the error for a type name that is none of valid (the
// names a command accepts): one wording everywhere, with the valid names
// Suggest finds ("q4k" -> q4_K, "q4km" -> Q4_K_M, "fp8" -> fp8_e4m3 or
// fp8_e5m2, "int8convrot" -> int8_convrot).
func UnknownType(name string, valid []string) error {
	if name == "" {
		return fmt.Errorf("no type given")
	}
	if s := Suggest(name, valid); len(s) > 0 {
		return fmt.Errorf("unknown type %q (did you mean %s?)", name, strings.Join(s, " or "))
	}
	return fmt.Errorf("unknown type %q", name)
}

// maxSuggestions bounds the names Suggest returns.
const maxSuggestions = 3

// Suggest returns the names of valid that name was probably meant to be,
// comparing them without case, underscores or dashes: the ones equal to it
// so ("q4km" is Q4_K_M), else the ones it begins (a prefix of two or more
// characters: "fp8" begins fp8_e4m3 and fp8_e5m2), else the nearest one by
// edit distance when it is close enough to be a typo; at most three, in
// the order of valid, none when nothing is close.
func Suggest(name string, valid []string) []string {
	k := nameKey(name)
	var equal, prefix []string
	// Names that differ only in case (q4_K, and quantize's alias Q4_K) are one suggestion.
	has := func(s []string, v string) bool {
		return slices.ContainsFunc(s, func(x string) bool { return strings.EqualFold(x, v) })
	}
	for _, v := range valid {
		switch kv := nameKey(v); {
		case kv == k && !has(equal, v):
			equal = append(equal, v)
		case len(k) >= 2 && strings.HasPrefix(kv, k) && !has(prefix, v):
			prefix = append(prefix, v)
		}
	}
	for _, s := range [][]string{equal, prefix} {
		if len(s) > 0 {
			return s[:min(len(s), maxSuggestions)]
		}
	}
	if n := nearest(name, valid); n != "" {
		return []string{n}
	}
	return nil
}

// nameKey is a name as Suggest compares it: lower case, no '_' or '-'.
func nameKey(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' {
			return -1
		}
		return r
	}, strings.ToLower(s))
}

// nearest returns the name of valid closest to name by edit distance
// (compared as nameKey, ties broken as written), or "" when none is close
// enough to be a typo. A name
// that is not within the limit in length alone is never compared: the
// work per call is bounded by the valid names, not by the input, however
// long a mistyped (or hostile) argument is.
func nearest(name string, valid []string) string {
	limit := max(2, len(name)/3)
	low, raw := nameKey(name), strings.ToLower(name)
	best, bestD, bestRaw := "", limit+1, 0
	for _, v := range valid {
		lv := nameKey(v)
		if d := len(low) - len(lv); d > limit || -d > limit {
			continue // the distance is at least the difference in length
		}
		d := editDistance(low, lv, bestD)
		if d > limit || d > bestD {
			continue
		}
		// Ties go to the name nearer as written ("Q4_K_X": Q4_K_S, not q4_K).
		r := editDistance(raw, strings.ToLower(v), len(raw)+len(v))
		if d < bestD || r < bestRaw {
			best, bestD, bestRaw = v, d, r
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b in bytes, or
// limit+1 when it is over limit (the rows stop once every entry is).
func editDistance(a, b string, limit int) int {
	var buf [2 * 32]int
	row := buf[:]
	if 2*(len(b)+1) > len(row) {
		row = make([]int, 2*(len(b)+1))
	}
	prev, cur := row[:len(b)+1], row[len(b)+1:2*(len(b)+1)]
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		lo := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			lo = min(lo, cur[j])
		}
		if lo > limit {
			return limit + 1
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit+1)
}

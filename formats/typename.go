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
// names a command accepts): one wording everywhere, with the nearest valid
// name suggested when one is close ("q4k" -> q4_K, "int8convrot" ->
// int8_convrot).
func UnknownType(name string, valid []string) error {
	if name == "" {
		return fmt.Errorf("no type given")
	}
	if s := nearest(name, valid); s != "" {
		return fmt.Errorf("unknown type %q (did you mean %s?)", name, s)
	}
	return fmt.Errorf("unknown type %q", name)
}

// nearest returns the name of valid closest to name by edit distance
// (ignoring case), or "" when none is close enough to be a typo. A name
// that is not within the limit in length alone is never compared: the
// work per call is bounded by the valid names, not by the input, however
// long a mistyped (or hostile) argument is.
func nearest(name string, valid []string) string {
	limit := max(2, len(name)/3)
	low := strings.ToLower(name)
	best, bestD := "", limit+1
	for _, v := range valid {
		lv := strings.ToLower(v)
		if d := len(low) - len(lv); d > limit || -d > limit {
			continue // the distance is at least the difference in length
		}
		if d := editDistance(low, lv, bestD-1); d < bestD {
			best, bestD = v, d
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

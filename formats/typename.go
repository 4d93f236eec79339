package formats

import (
	"fmt"
	"sort"
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
	return 0, UnknownType(name, TypeNames())
}

// TypeNames returns every type name as ggml spells it, sorted.
func TypeNames() []string {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

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
// (ignoring case), or "" when none is close enough to be a typo.
func nearest(name string, valid []string) string {
	best, bestD := "", -1
	low := strings.ToLower(name)
	for _, v := range valid {
		d := editDistance(low, strings.ToLower(v))
		if bestD < 0 || d < bestD {
			best, bestD = v, d
		}
	}
	if bestD < 0 || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

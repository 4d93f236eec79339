package names

import (
	"fmt"
	"sort"
	"strings"
)

// pair is one rename: from becomes to.
type pair struct{ from, to string }

// substRules is an ordered list of substring renames with sd.cpp's
// replace_with_name_map semantics: each rule in turn replaces the first
// occurrence of its from, once, in the running result. Order matters because
// a rule may rename what an earlier rule produced (SDXL's upsampler fix-up).
//
// guards only make it fast: every rule's from contains one of the guards, so
// when the name contains none of them no rule can match and the list is
// skipped without a search per rule. An empty guard list always runs.
type substRules struct {
	rules  []pair
	guards []string
}

// apply runs the rules over s; with check false the guards are ignored (tests
// compare both paths).
func (r *substRules) apply(s string, check bool) string {
	if check && len(r.guards) > 0 && !containsAny(s, r.guards) {
		return s
	}
	for _, p := range r.rules {
		if i := strings.Index(s, p.from); i >= 0 {
			s = s[:i] + p.to + s[i+len(p.from):]
		}
	}
	return s
}

// validate reports a rule whose from contains no guard (the skip would then
// be wrong).
func (r *substRules) validate() error {
	if len(r.guards) == 0 {
		return nil
	}
	for _, p := range r.rules {
		if !containsAny(p.from, r.guards) {
			return fmt.Errorf("rule %q -> %q is not covered by guards %q", p.from, p.to, r.guards)
		}
	}
	return nil
}

func containsAny(s string, subs []string) bool {
	for _, g := range subs {
		if strings.Contains(s, g) {
			return true
		}
	}
	return false
}

// prefixList is an ordered list of prefix renames: the first from that
// starts the name is replaced and the rest are not tried.
type prefixList []pair

// apply returns s with its first matching prefix renamed, and whether one
// matched.
func (l prefixList) apply(s string) (string, bool) {
	for _, p := range l {
		if strings.HasPrefix(s, p.from) {
			return p.to + s[len(p.from):], true
		}
	}
	return s, false
}

// byFirstByte indexes a prefixList by the first byte of each from, keeping
// the list order within a byte, so a lookup tries only the few prefixes that
// can match.
type byFirstByte [256]prefixList

func indexPrefixes(l prefixList) *byFirstByte {
	var idx byFirstByte
	for _, p := range l {
		idx[p.from[0]] = append(idx[p.from[0]], p)
	}
	return &idx
}

func (idx *byFirstByte) apply(s string) (string, bool) {
	if s == "" {
		return s, false
	}
	return idx[s[0]].apply(s)
}

// prefixTable is a large set of prefix renames in which no key is a prefix
// of another, so at most one key can start a name and the iteration order of
// sd.cpp's unordered_map cannot matter. A lookup is a binary search: the only
// key that can be a prefix of s is the greatest key not above s.
type prefixTable struct {
	keys, vals []string
}

// newPrefixTable sorts m into a table; it fails when one key is a prefix of
// another, since the result would then depend on sd.cpp's hash order.
func newPrefixTable(m map[string]string) (*prefixTable, error) {
	t := &prefixTable{keys: make([]string, 0, len(m))}
	for k := range m {
		t.keys = append(t.keys, k)
	}
	sort.Strings(t.keys)
	t.vals = make([]string, len(t.keys))
	for i, k := range t.keys {
		t.vals[i] = m[k]
		// In sorted order a key that is a prefix of others is directly
		// followed by one of them.
		if i > 0 && strings.HasPrefix(k, t.keys[i-1]) {
			return nil, fmt.Errorf("prefix table: key %q is a prefix of %q", t.keys[i-1], k)
		}
	}
	return t, nil
}

func mustPrefixTable(m map[string]string) *prefixTable {
	t, err := newPrefixTable(m)
	if err != nil {
		// The tables are static data of this package: a failure is a bug
		// caught by every test run, never a property of user input.
		panic(err)
	}
	return t
}

func (t *prefixTable) apply(s string) string {
	i := sort.SearchStrings(t.keys, s)
	if i < len(t.keys) && t.keys[i] == s {
		return t.vals[i]
	}
	if i > 0 && strings.HasPrefix(s, t.keys[i-1]) {
		return t.vals[i-1] + s[len(t.keys[i-1]):]
	}
	return s
}

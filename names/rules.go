package names

import (
	"bytes"
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
// apply is that plain loop. The editor (below) runs the same rules faster,
// and the fuzz target checks that the two always agree:
//   - guard (or, without one, guards: "contains one of these") is true for
//     every text that contains some rule's from, so when it is false no rule
//     can match and the list is skipped at the cost of one check;
//   - masks holds, per rule, the set of hashed 3-byte windows of its from. A
//     text can contain from only if its own window set covers the rule's, so
//     a long list searches only for the few rules that pass that test.
type substRules struct {
	rules  []pair
	guards []string
	// blocks selects the diffusersBlock guard instead of guards. (A switch,
	// not a func value: escape analysis cannot see through a call of one,
	// and the editor's buffer would move to the heap.)
	blocks bool

	// Set up by prepare.
	froms, guardBytes [][]byte
	masks             []gramMask
	byBlock           map[blockKey][]int // blocks lists: rules by the key of their "_block"
	blockOff          []int              // and where in from that "_block" is
}

// apply runs the rules over s, searching for every rule in turn.
func (r *substRules) apply(s string) string {
	for _, p := range r.rules {
		if i := strings.Index(s, p.from); i >= 0 {
			s = s[:i] + p.to + s[i+len(p.from):]
		}
	}
	return s
}

// maskedMin is the list length from which the window masks pay for the
// pass over the name that they need.
const maskedMin = 4

// prepare sets up the byte forms of froms and guards and, for a long list,
// the masks.
func (r *substRules) prepare() {
	r.froms = make([][]byte, len(r.rules))
	for k, p := range r.rules {
		r.froms[k] = []byte(p.from)
	}
	r.guardBytes = make([][]byte, len(r.guards))
	for k, g := range r.guards {
		r.guardBytes[k] = []byte(g)
	}
	if r.blocks {
		// Every rule of the block lists holds one "_block" with two bytes
		// before it and three after, all inside its from; the rules that can
		// match a text are those whose key the text has at one of its
		// "_block"s. (validate checks that every rule has a key.)
		r.byBlock = map[blockKey][]int{}
		r.blockOff = make([]int, len(r.froms))
		for k, f := range r.froms {
			r.blockOff[k] = bytes.Index(f, blockWord)
			if key, ok := keyOfBlock(f); ok {
				r.byBlock[key] = append(r.byBlock[key], k)
			}
		}
		return
	}
	if len(r.rules) >= maskedMin {
		r.masks = make([]gramMask, len(r.rules))
		for k, p := range r.rules {
			r.masks[k] = gramsOf([]byte(p.from))
		}
	}
}

func (r *substRules) mayMatch(b []byte) bool {
	switch {
	case r.blocks:
		return diffusersBlock(b)
	case len(r.guardBytes) > 0:
		for _, g := range r.guardBytes {
			if bytes.Contains(b, g) {
				return true
			}
		}
		return false
	}
	return true
}

// validate reports a rule that the guard would wrongly skip: the guards are
// all "contains" tests, true on a text whenever they are true on a part of
// it, so being true on every from is enough.
func (r *substRules) validate() error {
	for _, p := range r.rules {
		if !r.mayMatch([]byte(p.from)) {
			return fmt.Errorf("rule %q -> %q is not covered by the guard", p.from, p.to)
		}
		if _, ok := keyOfBlock([]byte(p.from)); r.blocks && (!ok || bytes.Count([]byte(p.from), blockWord) != 1) {
			return fmt.Errorf("block rule %q has no single \"_block\" key", p.from)
		}
	}
	return nil
}

// blockKey packs the two bytes before a "_block" and the three after it.
type blockKey uint64

// blockKeyAt returns the key of the "_block" at j in b, if b holds its bytes.
func blockKeyAt(b []byte, j int) (blockKey, bool) {
	a := j + len(blockWord)
	if j < 2 || a+3 > len(b) {
		return 0, false
	}
	return blockKey(b[j-2])<<32 | blockKey(b[j-1])<<24 | blockKey(b[a])<<16 | blockKey(b[a+1])<<8 | blockKey(b[a+2]), true
}

func keyOfBlock(b []byte) (blockKey, bool) {
	j := bytes.Index(b, blockWord)
	if j < 0 {
		return 0, false
	}
	return blockKeyAt(b, j)
}

// gramMask is a 256-bit set of hashed 3-byte windows.
type gramMask [4]uint64

func gramsOf(b []byte) gramMask {
	var m gramMask
	for i := 0; i+3 <= len(b); i++ {
		h := (uint32(b[i])<<16 | uint32(b[i+1])<<8 | uint32(b[i+2])) * 0x9E3779B1 >> 24
		m[h>>6] |= 1 << (h & 63)
	}
	return m
}

// covers reports whether every window of o is in m.
func (m *gramMask) covers(o *gramMask) bool {
	return o[0]&^m[0]|o[1]&^m[1]|o[2]&^m[2]|o[3]&^m[3] == 0
}

// editor rewrites one name in a byte buffer: the part's prefix, then the
// text the rules work on. A part runs several lists one after another, and
// building the result in place costs one allocation for a renamed name and
// none for a name left alone.
//
// The buffer is an array inside the editor, addressed by length, and never a
// slice stored in it: Go's escape analysis treats every pointer stored
// through a pointer as escaping, which would move the buffer to the heap.
type editor struct {
	arr     [256]byte
	big     []byte // replaces arr for a name that outgrows it
	n, off  int    // name length; the rules see [off, n)
	m       gramMask
	mValid  bool
	changed bool
}

// buf returns the buffer with room bytes in view.
func (e *editor) buf(room int) []byte {
	if e.big != nil {
		return e.big[:room]
	}
	return e.arr[:room]
}

func (e *editor) load(prefix, text string) {
	e.n, e.off = len(prefix)+len(text), len(prefix)
	e.big = nil
	if e.n > len(e.arr) {
		e.big = make([]byte, e.n, 2*e.n)
	}
	b := e.buf(e.n)
	copy(b, prefix)
	copy(b[e.off:], text)
	e.mValid, e.changed = false, false
}

// text is the part the rules see.
func (e *editor) text() []byte { return e.buf(e.n)[e.off:] }

// result returns the edited name, or orig when nothing changed and orig is
// not "" (a caller that has no string of the name yet passes "").
func (e *editor) result(orig string) string {
	if !e.changed && orig != "" {
		return orig
	}
	return string(e.buf(e.n))
}

// run applies r to the text, with r's guard and masks.
func (e *editor) run(r *substRules) {
	if r.byBlock != nil {
		// The candidate search is itself the guard: no candidate, no match.
		e.runBlocks(r)
		return
	}
	if !r.mayMatch(e.text()) {
		return
	}
	for k := range r.rules {
		if r.masks != nil {
			if !e.mValid {
				e.m, e.mValid = gramsOf(e.text()), true
			}
			if !e.m.covers(&r.masks[k]) {
				continue
			}
		}
		if i := bytes.Index(e.text(), r.froms[k]); i >= 0 {
			e.replace(e.off+i, len(r.froms[k]), r.rules[k].to)
		}
	}
}

// runBlocks applies a block list. Every rule's from holds one "_block",
// so every occurrence of a from lines up with a "_block" of the text with the
// same key: the scan looks only there, finds the first rule (from next on)
// that matches and its first position, renames, and scans again.
func (e *editor) runBlocks(r *substRules) {
	for next := 0; next < len(r.rules); {
		t := e.text()
		best, at := -1, 0
		for i := 0; ; {
			j := bytes.Index(t[i:], blockWord)
			if j < 0 {
				break
			}
			j += i
			if key, ok := blockKeyAt(t, j); ok {
				for _, k := range r.byBlock[key] {
					// A later "_block" can only give a later position for
					// the same rule, so the first hit of a rule is its first.
					if k < next || (best >= 0 && k >= best) {
						continue
					}
					if p := j - r.blockOff[k]; p >= 0 && bytes.HasPrefix(t[p:], r.froms[k]) {
						best, at = k, p
					}
				}
			}
			i = j + len(blockWord)
		}
		if best < 0 {
			return
		}
		e.replace(e.off+at, len(r.froms[best]), r.rules[best].to)
		next = best + 1
	}
}

// replace puts to in place of the n bytes at i.
func (e *editor) replace(i, n int, to string) {
	tail := e.n - i - n
	size := i + len(to) + tail
	room := max(size, e.n)
	switch {
	case e.big == nil && room > len(e.arr):
		e.big = make([]byte, room, 2*room)
		copy(e.big, e.arr[:e.n])
	case e.big != nil && room > cap(e.big):
		nb := make([]byte, room, 2*room)
		copy(nb, e.big[:e.n])
		e.big = nb
	}
	b := e.buf(room)
	copy(b[i+len(to):], b[i+n:i+n+tail]) // copy moves overlapping bytes correctly
	copy(b[i:], to)
	e.n = size
	e.mValid, e.changed = false, true
}

// prefixList is an ordered list of prefix renames: the first from that
// starts the name is replaced and the rest are not tried.
type prefixList []pair

// apply returns s with its first matching prefix renamed, and whether one
// matched.
func (l prefixList) apply(s string) (string, bool) {
	if to, rest, ok := l.match(s); ok {
		return to + rest, true
	}
	return s, false
}

// match returns the new prefix and the rest of s for the first prefix that
// starts s, so a caller can build the renamed name together with its next
// edit.
func (l prefixList) match(s string) (to, rest string, ok bool) {
	for _, p := range l {
		if strings.HasPrefix(s, p.from) {
			return p.to, s[len(p.from):], true
		}
	}
	return "", s, false
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

func (idx *byFirstByte) match(s string) (to, rest string, ok bool) {
	if s == "" {
		return "", s, false
	}
	return idx[s[0]].match(s)
}

// prefixTable is a large set of prefix renames in which no key is a prefix
// of another, so at most one key can start a name and the iteration order of
// sd.cpp's unordered_map cannot matter. A lookup is a binary search: the only
// key that can be a prefix of s is the greatest key not above s.
type prefixTable struct {
	keys, vals []string
	// exact holds the same renames: most names are a whole key, and one
	// hash lookup is cheaper than the binary search's string compares.
	exact map[string]string
}

// newPrefixTable sorts m into a table; it fails when one key is a prefix of
// another, since the result would then depend on sd.cpp's hash order.
func newPrefixTable(m map[string]string) (*prefixTable, error) {
	t := &prefixTable{keys: make([]string, 0, len(m)), exact: m}
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
	if to, ok := t.exact[s]; ok {
		return to
	}
	i := sort.SearchStrings(t.keys, s)
	if i > 0 && strings.HasPrefix(s, t.keys[i-1]) {
		return t.vals[i-1] + s[len(t.keys[i-1]):]
	}
	return s
}

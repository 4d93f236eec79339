package text

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// spmCharsMap is a decoded SentencePiece precompiled_charsmap: the normalization rules of a model (for T5
// the "nmt_nfkc" rule: NFKC plus the NMT whitespace and control-character clean-up) compiled into a
// darts-clone double-array trie over UTF-8 byte sequences, whose values are byte offsets of NUL-terminated
// replacement strings.
//
// The blob is laid out as <uint32 little-endian size of the trie in bytes><trie: size/4 little-endian
// uint32 units><replacement strings, each ended by a NUL byte>. A trie unit packs, from the low bit up,
// an 8-bit label, a has-leaf bit (bit 8), an offset-scale bit (bit 9) and a 22-bit offset (bits 10..31,
// shifted left by 8 when the scale bit is set); a unit whose bit 31 is set is a value unit holding a
// 31-bit value instead. From a node at position p whose unit is u, the child for byte c sits at
// p ^ offset(u) ^ c and belongs to p when its label equals c; a node that ends a key has the leaf bit,
// and its value unit sits at p ^ offset(u) (the child for label 0).
type spmCharsMap struct {
	blob  []byte   // the precompiled_charsmap exactly as stored, for writing it back
	units []uint32 // the double-array trie
	strs  []byte   // the replacement strings
}

// parseCharsMap decodes a precompiled_charsmap blob. The trie is checked lazily: a lookup that would
// leave the arrays or read an unterminated string simply stops matching, so a corrupt map cannot panic.
func parseCharsMap(blob []byte) (*spmCharsMap, error) {
	if len(blob) <= 4 {
		return nil, fmt.Errorf("precompiled charsmap of %d bytes is too short to hold a trie", len(blob))
	}
	size := binary.LittleEndian.Uint32(blob)
	if uint64(size)+4 > uint64(len(blob)) {
		return nil, fmt.Errorf("precompiled charsmap declares a trie of %d bytes but holds only %d after the size", size, len(blob)-4)
	}
	if size == 0 || size%4 != 0 {
		return nil, fmt.Errorf("precompiled charsmap trie size %d is not a positive multiple of 4", size)
	}
	units := make([]uint32, size/4)
	for i := range units {
		units[i] = binary.LittleEndian.Uint32(blob[4+4*i:])
	}
	return &spmCharsMap{blob: blob, units: units, strs: blob[4+size:]}, nil
}

// dartsOffset returns the XOR offset a unit applies to reach its children.
func dartsOffset(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }

// longestPrefix returns the replacement of the longest key that is a prefix of s and the key's length in
// bytes; n is 0 when no key matches. SentencePiece takes the longest of all matching rules, which is the
// last one met on the way down the trie.
func (m *spmCharsMap) longestPrefix(s string) (repl string, n int) {
	units := m.units
	pos := dartsOffset(units[0])
	for i := 0; i < len(s); i++ {
		c := uint32(s[i])
		pos ^= c
		if pos >= uint32(len(units)) {
			return repl, n
		}
		u := units[pos]
		// A value unit has bit 31 set, so it never equals a byte label.
		if u&(1<<31|0xFF) != c {
			return repl, n
		}
		pos ^= dartsOffset(u)
		if u&(1<<8) != 0 {
			if pos >= uint32(len(units)) {
				return repl, n
			}
			if r, ok := m.replacement(units[pos] & (1<<31 - 1)); ok {
				repl, n = r, i+1
			}
		}
	}
	return repl, n
}

// replacement returns the NUL-terminated string at offset off of the strings blob. A string that is not
// valid UTF-8 (only a corrupt map has one) counts as no rule, so normalized text stays valid UTF-8.
func (m *spmCharsMap) replacement(off uint32) (string, bool) {
	if uint64(off) >= uint64(len(m.strs)) {
		return "", false
	}
	rest := m.strs[off:]
	end := bytes.IndexByte(rest, 0)
	if end < 0 || !utf8.Valid(rest[:end]) {
		return "", false
	}
	return string(rest[:end]), true
}

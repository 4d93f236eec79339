package formats

import "hash/maphash"

// NameIndex finds the entries of a list by name through a hash table of
// their positions, without keying a map by the name strings: 8 to 16 bytes
// an entry rather than the 40 to 100 a map[string]int takes (20 to 50 MB
// for each such map over a header of 500k tensors).
// The list stays the caller's: name(i) must keep returning the same string
// for every position added. The zero value is not usable; call NewNameIndex.
type NameIndex struct {
	name  func(i int) string
	seed  maphash.Seed
	slots []int32 // position+1; 0 is an empty slot
	n     int
}

// NewNameIndex returns an empty index sized for capacity entries whose
// names name(i) gives.
func NewNameIndex(capacity int, name func(i int) string) *NameIndex {
	x := &NameIndex{name: name, seed: maphash.MakeSeed()}
	x.slots = make([]int32, tableSize(capacity))
	return x
}

// tableSize is a power of two at least twice n (linear probing stays short
// below half full), 16 at least.
func tableSize(n int) int {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return size
}

// Add records position i under name(i) unless that name is already there;
// it returns the position already holding the name, or -1 when i was added.
func (x *NameIndex) Add(i int) int {
	if 2*(x.n+1) > len(x.slots) {
		x.grow()
	}
	s := x.name(i)
	mask := uint64(len(x.slots) - 1)
	for h := maphash.String(x.seed, s) & mask; ; h = (h + 1) & mask {
		p := x.slots[h]
		if p == 0 {
			x.slots[h] = int32(i + 1)
			x.n++
			return -1
		}
		if x.name(int(p-1)) == s {
			return int(p - 1)
		}
	}
}

// Lookup returns the position of the entry named s, or -1.
func (x *NameIndex) Lookup(s string) int {
	mask := uint64(len(x.slots) - 1)
	for h := maphash.String(x.seed, s) & mask; ; h = (h + 1) & mask {
		p := x.slots[h]
		if p == 0 {
			return -1
		}
		if x.name(int(p-1)) == s {
			return int(p - 1)
		}
	}
}

// Len returns the number of names in the index.
func (x *NameIndex) Len() int { return x.n }

// grow doubles the table and reinserts every position.
func (x *NameIndex) grow() {
	old := x.slots
	x.slots = make([]int32, 2*len(old))
	mask := uint64(len(x.slots) - 1)
	for _, p := range old {
		if p == 0 {
			continue
		}
		h := maphash.String(x.seed, x.name(int(p-1))) & mask
		for x.slots[h] != 0 {
			h = (h + 1) & mask
		}
		x.slots[h] = p
	}
}

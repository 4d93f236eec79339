package formats

import (
	"fmt"
	"testing"
)

// NameIndex agrees with a map[string]int on adds, repeats and lookups,
// across growth from a too-small capacity.
func TestNameIndexMatchesMap(t *testing.T) {
	var names []string
	for i := range 5000 {
		names = append(names, fmt.Sprintf("t.%d", i%3700)) // repeats after 3700
	}
	names = append(names, "")
	for _, capacity := range []int{0, 10, len(names)} {
		x := NewNameIndex(capacity, func(i int) string { return names[i] })
		want := map[string]int{}
		for i, s := range names {
			prev, seen := want[s]
			if !seen {
				prev = -1
				want[s] = i
			}
			if got := x.Add(i); got != prev {
				t.Fatalf("capacity %d: Add(%d) %q = %d, want %d", capacity, i, s, got, prev)
			}
		}
		if x.Len() != len(want) {
			t.Errorf("capacity %d: Len %d, want %d", capacity, x.Len(), len(want))
		}
		for s, i := range want {
			if got := x.Lookup(s); got != i {
				t.Errorf("capacity %d: Lookup(%q) = %d, want %d", capacity, s, got, i)
			}
		}
		if got := x.Lookup("absent"); got != -1 {
			t.Errorf("capacity %d: Lookup(absent) = %d", capacity, got)
		}
	}
}

package main

import "testing"

// The default budget is half the available memory, in whole MiB from 1
// MiB up; none (0) where the available memory is unknown, and never none
// when some is available.
func TestDefaultBudget(t *testing.T) {
	for _, c := range []struct{ available, want int64 }{
		{0, 0},
		{-1, 0},
		{22 << 30, 11 << 30},
		{15<<30 + 12345, 7<<30 + 512<<20},
		{3<<20 + 1, 1 << 20},
		{1 << 20, 512 << 10},
		{1, 1},
	} {
		if got := defaultBudget(c.available); got != c.want {
			t.Errorf("defaultBudget(%d) = %d, want %d", c.available, got, c.want)
		}
	}
}

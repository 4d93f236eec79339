package main

import (
	"testing"
)

func TestIdleThreads(t *testing.T) {
	seq := func(v ...int) func() (int, bool) {
		i := 0
		return func() (int, bool) { n := v[i%len(v)]; i++; return n, true }
	}
	unknown := func() (int, bool) { return 0, false }
	cases := []struct {
		name    string
		cpus    int
		running func() (int, bool)
		want    int
	}{
		{"idle machine: only this process runs", 16, seq(1), 16},
		{"two other runnable threads", 16, seq(3), 14},
		{"a busy two-core machine", 2, seq(18, 15, 15, 12, 16), 1},
		{"one spike among idle readings", 8, seq(1, 1, 30, 1, 1), 8},
		{"no /proc/stat", 4, unknown, 4},
		{"a reading of zero", 4, seq(0), 4},
	}
	for _, c := range cases {
		if got := idleThreads(c.cpus, c.running, 5, 0); got != c.want {
			t.Errorf("%s: %d threads, want %d", c.name, got, c.want)
		}
	}
	if n := defaultGGMLThreads(); n < 1 {
		t.Errorf("defaultGGMLThreads() = %d", n)
	}
}

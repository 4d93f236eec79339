package splitmix

import "testing"

// The first outputs for seed 0, as published with the reference
// implementation (and reproduced by every port of it).
func TestKnownOutputs(t *testing.T) {
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	s := Stream{}
	for i, w := range want {
		if got := s.Next(); got != w {
			t.Errorf("output %d = %#x, want %#x", i, got, w)
		}
	}
}

// At gives the same numbers as the stream, for any seed.
func TestAtMatchesStream(t *testing.T) {
	for _, seed := range []uint64{0, 1, 42, 1 << 63, ^uint64(0)} {
		s := Stream{State: seed}
		for i := uint64(0); i < 100; i++ {
			if a, b := At(seed, i), s.Next(); a != b {
				t.Fatalf("seed %d output %d: At %#x, stream %#x", seed, i, a, b)
			}
		}
	}
}

// Package splitmix is SplitMix64 (Steele, Lea and Flood, 2014), the one
// generator sdtool uses where it needs reproducible pseudo-random numbers
// from a seed: merge's DARE drops and the synthetic models' weights. Its
// i-th output can be computed directly, so work split into chunks or
// threads draws the same numbers as a single pass.
//
// It is a leaf of the package map: it imports nothing, and any package may
// use it.
package splitmix

// Gamma is SplitMix64's increment γ: 2^64 divided by the golden ratio,
// rounded to an odd number.
const Gamma = 0x9e3779b97f4a7c15

// Mix is SplitMix64's output function, a bijection of uint64.
func Mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// At returns output i (from 0) of the sequence seeded with seed:
// Mix(seed + (i+1)·Gamma).
func At(seed, i uint64) uint64 { return Mix(seed + (i+1)*Gamma) }

// Stream is the sequential form: each Next advances the state by Gamma and
// returns the mixed state.
type Stream struct {
	// State is the seed, then the last state.
	State uint64
}

// Next returns the next output.
func (s *Stream) Next() uint64 {
	s.State += Gamma
	return Mix(s.State)
}

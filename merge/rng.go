package merge

import "hash/fnv"

// DARE's random drops come from a counter-based generator: element i of a
// tensor's delta from fine-tune j is dropped when Uniform(Key(seed, name, j), i)
// is below p. Every decision depends on (seed, tensor name, fine-tune,
// element index) alone, so the output is the same for any chunk size, thread
// count or order of work.
//
// The generator is SplitMix64 (Steele, Lea and Flood, 2014) evaluated at a
// counter: the i-th output of the SplitMix64 sequence seeded with key is
// mix(key + (i+1)·γ), which can be computed for any i directly.

// golden is SplitMix64's increment γ (2^64 divided by the golden ratio, odd).
const golden = 0x9e3779b97f4a7c15

// mix64 is SplitMix64's output function (a bijection of uint64).
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Key derives the generator key of one tensor's delta from one fine-tune
// (0 for B, 1 for C).
func Key(seed int64, name string, finetune int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	k := mix64(uint64(seed) + golden)
	k = mix64(k ^ h.Sum64())
	return mix64(k + uint64(finetune)*golden)
}

// Uniform returns the i-th value in [0, 1) of the stream keyed by key: the
// top 53 bits of the i-th SplitMix64 output.
func Uniform(key uint64, i int64) float64 {
	return float64(mix64(key+(uint64(i)+1)*golden)>>11) * (1.0 / (1 << 53))
}

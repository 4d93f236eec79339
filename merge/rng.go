package merge

import (
	"hash/fnv"

	"github.com/sdtool/sdtool/internal/splitmix"
)

// DARE's random drops come from a counter-based generator: element i of a
// tensor's delta from fine-tune j is dropped when Uniform(Key(seed, name, j), i)
// is below p. Every decision depends on (seed, tensor name, fine-tune,
// element index) alone, so the output is the same for any chunk size, thread
// count or order of work. The generator is SplitMix64 (package splitmix)
// evaluated at a counter.

// Key derives the generator key of one tensor's delta from one fine-tune
// (0 for B, 1 for C).
func Key(seed int64, name string, finetune int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	k := splitmix.Mix(uint64(seed) + splitmix.Gamma)
	k = splitmix.Mix(k ^ h.Sum64())
	return splitmix.Mix(k + uint64(finetune)*splitmix.Gamma)
}

// Uniform returns the i-th value in [0, 1) of the stream keyed by key: the
// top 53 bits of the i-th SplitMix64 output.
func Uniform(key uint64, i int64) float64 {
	return float64(splitmix.At(key, uint64(i))>>11) * (1.0 / (1 << 53))
}

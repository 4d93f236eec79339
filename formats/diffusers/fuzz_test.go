package diffusers

import (
	"slices"
	"testing"
)

// FuzzWeightMap: the .bin index reader never panics, and every shard it
// returns is one of the map's values, listed once.
func FuzzWeightMap(f *testing.F) {
	f.Add([]byte(`{"weight_map": {"a": "x.bin", "b": "y.bin", "c": "x.bin"}}`))
	f.Add([]byte(`{"metadata": {"total_size": 1}, "weight_map": {}}`))
	f.Add([]byte(`{"weight_map": []}`))
	f.Add([]byte(`{"weight_map": {"a": 1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		shards, m, err := weightMap(b)
		if err != nil {
			return
		}
		for i, s := range shards {
			if slices.Index(shards, s) != i {
				t.Fatalf("shard %q listed twice", s)
			}
		}
		for _, s := range m {
			if !slices.Contains(shards, s) {
				t.Fatalf("shard %q of the map not listed", s)
			}
		}
	})
}

package gguf

import (
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// splitTensors is five F32 tensors of 40, 40, 100, 8 and 64 bytes (32,
// 32, 96, 0 and 32 more once padded to 32: 64, 64, 128, 32, 64).
func splitTensors() []formats.Tensor {
	return []formats.Tensor{
		{Name: "a", Type: formats.F32, Shape: []int64{10}},
		{Name: "b", Type: formats.F32, Shape: []int64{2, 5}},
		{Name: "c", Type: formats.F32, Shape: []int64{25}},
		{Name: "d", Type: formats.F32, Shape: []int64{1, 2}},
		{Name: "e", Type: formats.F32, Shape: []int64{16}},
	}
}

func TestPlanSplitCuts(t *testing.T) {
	for _, c := range []struct {
		name   string
		lim    SplitLimits
		counts []int
	}{
		// The padded sizes are 64, 64, 128, 32, 64: a shard ends before the
		// tensor that would take it past the limit.
		{"size 128", SplitLimits{MaxBytes: 128}, []int{2, 1, 2}},
		{"size 191", SplitLimits{MaxBytes: 191}, []int{2, 2, 1}},
		{"a tensor over the limit alone", SplitLimits{MaxBytes: 100}, []int{1, 1, 1, 2}},
		{"size 1000", SplitLimits{MaxBytes: 1000}, []int{5}},
		{"tensors 2", SplitLimits{MaxTensors: 2}, []int{2, 2, 1}},
		{"tensors 5", SplitLimits{MaxTensors: 5}, []int{5}},
		{"metadata first", SplitLimits{MaxTensors: 3, NoTensorsFirst: true}, []int{0, 3, 2}},
	} {
		shards, err := PlanSplit(nil, splitTensors(), c.lim)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []int
		first := 0
		for _, s := range shards {
			if s.First != first {
				t.Errorf("%s: shard starts at %d, want %d", c.name, s.First, first)
			}
			first += s.Count
			got = append(got, s.Count)
		}
		if !slices.Equal(got, c.counts) {
			t.Errorf("%s: shards of %v tensors, want %v", c.name, got, c.counts)
		}
	}
}

// The first shard gets every key, then the split keys in the order
// gguf_set_val leaves them (split.count set twice ends up last); the
// others only the split keys; old split keys are replaced, not repeated.
func TestPlanSplitKeys(t *testing.T) {
	meta := formats.Metadata{
		{Key: "general.architecture", Type: formats.TypeString, Value: "flux"},
		{Key: SplitCountKey, Type: formats.TypeUint16, Value: uint16(9)},
		{Key: "general.file_type", Type: formats.TypeUint32, Value: uint32(7)},
	}
	shards, err := PlanSplit(meta, splitTensors(), SplitLimits{MaxTensors: 2})
	if err != nil {
		t.Fatal(err)
	}
	keys := func(m formats.Metadata) string {
		var s []string
		for _, kv := range m {
			s = append(s, kv.Key)
		}
		return strings.Join(s, " ")
	}
	if got, want := keys(shards[0].Metadata), "general.architecture general.file_type split.no split.tensors.count split.count"; got != want {
		t.Errorf("first shard keys %q, want %q", got, want)
	}
	if got, want := keys(shards[2].Metadata), "split.no split.tensors.count split.count"; got != want {
		t.Errorf("last shard keys %q, want %q", got, want)
	}
	for k, s := range shards {
		no, _ := s.Metadata.Get(SplitNoKey)
		count, _ := s.Metadata.Get(SplitCountKey)
		total, _ := s.Metadata.Get(SplitTensorsCountKey)
		if no.Value != uint16(k) || count.Value != uint16(3) || total.Value != int32(5) {
			t.Errorf("shard %d: split.no %v, split.count %v, split.tensors.count %v", k, no.Value, count.Value, total.Value)
		}
	}
	if meta[1].Value != uint16(9) || len(meta) != 3 {
		t.Errorf("the input metadata changed: %v", meta)
	}
	merged := MergeMetadata(shards[0].Metadata)
	if got, want := keys(merged), "general.architecture general.file_type split.no split.tensors.count split.count"; got != want {
		t.Errorf("merged keys %q, want %q", got, want)
	}
	if kv, _ := merged.Get(SplitCountKey); kv.Value != uint16(0) {
		t.Errorf("merged split.count %v, want 0", kv.Value)
	}
	if got := keys(StripSplitKeys(merged)); got != "general.architecture general.file_type" {
		t.Errorf("stripped keys %q", got)
	}
}

func TestPlanSplitRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		meta formats.Metadata
		lim  SplitLimits
		want string
	}{
		{"first tensor over the limit", nil, SplitLimits{MaxBytes: 10}, `tensor "a": a shard would hold no tensor`},
		{"alignment", formats.Metadata{{Key: AlignmentKey, Type: formats.TypeUint32, Value: uint32(64)}}, SplitLimits{MaxTensors: 1}, "alignment 32"},
		{"negative", nil, SplitLimits{MaxTensors: -1}, "negative"},
	} {
		_, err := PlanSplit(c.meta, splitTensors(), c.lim)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	if SplitPrefix("out/m.gguf") != "out/m" || SplitPrefix("out/m") != "out/m" {
		t.Errorf("SplitPrefix")
	}
}

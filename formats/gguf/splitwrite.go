package gguf

import (
	"fmt"
	"math"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// SplitLimits says where a GGUF is cut into shards, with the rules of
// llama.cpp's gguf-split: a shard ends before the tensor that would take
// its tensor data (each tensor padded to 32 bytes, the header not counted)
// past MaxBytes, or before every MaxTensors-th tensor.
type SplitLimits struct {
	// MaxBytes is the most tensor data per shard; 0 means no size limit.
	MaxBytes int64
	// MaxTensors is the most tensors per shard; 0 means no count limit.
	MaxTensors int
	// NoTensorsFirst gives the first shard the metadata and no tensor, as
	// gguf-split's --no-tensor-first-split does.
	NoTensorsFirst bool
}

// Active reports whether the limits ask for a split at all.
func (l SplitLimits) Active() bool { return l.MaxBytes > 0 || l.MaxTensors > 0 || l.NoTensorsFirst }

// Shard is one file of a split GGUF: its metadata and the tensors
// [First, First+Count) of the whole model, in order.
type Shard struct {
	// Metadata is what the shard's header holds: every key of the model in
	// the first shard, the split keys alone in the others.
	Metadata formats.Metadata
	// First is the index of the shard's first tensor in the model's list.
	First int
	// Count is the number of tensors in the shard.
	Count int
}

// SplitOptions are the writer options gguf-split's output has: ggml's
// writer drops trailing dims of 1 and pads the data after every tensor,
// the last one included.
var SplitOptions = WriterOptions{TrimDims: true, PadEnd: true}

// PlanSplit cuts a model with metadata meta and tensors into shards by
// lim, as gguf-split --split does, and returns each shard's metadata and
// tensor range. A limit so small that a shard would get no tensor is an
// error, as in gguf-split; so is an alignment other than 32, which
// gguf-split's shards would state but not follow.
func PlanSplit(meta formats.Metadata, tensors []formats.Tensor, lim SplitLimits) ([]Shard, error) {
	if lim.MaxBytes < 0 || lim.MaxTensors < 0 {
		return nil, fmt.Errorf("split limits must not be negative")
	}
	if kv, ok := meta.Get(AlignmentKey); ok {
		if v, _ := kv.Value.(uint32); v != DefaultAlignment {
			return nil, fmt.Errorf("%s is %v: split GGUFs are written with alignment %d", AlignmentKey, kv.Value, DefaultAlignment)
		}
	}
	if len(tensors) > math.MaxInt32 {
		return nil, fmt.Errorf("%d tensors do not fit split.tensors.count (i32)", len(tensors))
	}
	shards := []Shard{{}}
	if lim.NoTensorsFirst {
		shards = append(shards, Shard{})
	}
	var cur int64 // tensor data of the current shard, padded
	for i := range tensors {
		t := &tensors[i]
		size, err := t.Type.Bytes(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %v", t.Name, err)
		}
		n := pad(size, DefaultAlignment)
		last := &shards[len(shards)-1]
		cut := lim.MaxBytes > 0 && cur+n > lim.MaxBytes ||
			lim.MaxTensors > 0 && i > 0 && i%lim.MaxTensors == 0
		if cut {
			if last.Count == 0 {
				return nil, fmt.Errorf("tensor %q: a shard would hold no tensor (its %d bytes exceed the limit of %d bytes per shard)", t.Name, n, lim.MaxBytes)
			}
			shards = append(shards, Shard{First: i})
			last, cur = &shards[len(shards)-1], 0
		}
		cur += n
		last.Count++
	}
	if len(shards) > math.MaxUint16 {
		return nil, fmt.Errorf("%d shards do not fit split.count (u16)", len(shards))
	}
	for k := range shards {
		var m formats.Metadata
		if k == 0 {
			m = append(m, meta...)
		}
		// The keys are set one by one as gguf-split sets them (a key set
		// again moves to the end), so split.count ends up last.
		m = setKV(m, formats.KV{Key: SplitNoKey, Type: formats.TypeUint16, Value: uint16(k)})
		m = setKV(m, formats.KV{Key: SplitCountKey, Type: formats.TypeUint16, Value: uint16(0)})
		m = setKV(m, formats.KV{Key: SplitTensorsCountKey, Type: formats.TypeInt32, Value: int32(len(tensors))})
		shards[k].Metadata = setKV(m, formats.KV{Key: SplitCountKey, Type: formats.TypeUint16, Value: uint16(len(shards))})
	}
	return shards, nil
}

// MergeMetadata returns the metadata gguf-split --merge writes for a split
// GGUF whose first shard has meta: the same keys with split.count set to
// 0 (moved to the end), so that no reader takes the result for a shard.
func MergeMetadata(meta formats.Metadata) formats.Metadata {
	return setKV(append(formats.Metadata(nil), meta...), formats.KV{Key: SplitCountKey, Type: formats.TypeUint16, Value: uint16(0)})
}

// StripSplitKeys returns meta without the split.* keys.
func StripSplitKeys(meta formats.Metadata) formats.Metadata {
	out := make(formats.Metadata, 0, len(meta))
	for _, kv := range meta {
		if !strings.HasPrefix(kv.Key, "split.") {
			out = append(out, kv)
		}
	}
	return out
}

// SplitPrefix returns the shard prefix for an output path: the path
// without its .gguf extension (out/model.gguf shards as
// out/model-00001-of-00003.gguf).
func SplitPrefix(path string) string {
	return strings.TrimSuffix(path, ".gguf")
}

// setKV sets kv in m as ggml's gguf_set_val_* does: an entry with the same
// key is removed and kv appended.
func setKV(m formats.Metadata, kv formats.KV) formats.Metadata {
	for i := range m {
		if m[i].Key == kv.Key {
			m = append(m[:i:i], m[i+1:]...)
			break
		}
	}
	return append(m, kv)
}

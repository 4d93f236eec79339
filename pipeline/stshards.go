package pipeline

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// safetensorsShards cuts a safetensors plan as Hugging Face shards a
// checkpoint: a shard ends before the tensor that would take its data past
// lim.MaxBytes (a larger tensor gets a shard of its own) or at every
// lim.MaxTensors tensors. The paths are PREFIX-00001-of-0000N.safetensors
// (PREFIX being Path without .safetensors), then the index,
// Path.index.json; every shard holds the plan's metadata.
func (p *Plan) safetensorsShards(tensors []formats.Tensor) ([]string, []gguf.Shard, error) {
	if p.Split.NoTensorsFirst {
		return nil, nil, fmt.Errorf("%s: a safetensors shard without tensors is not written", p.Path)
	}
	var shards []gguf.Shard
	var cur int64
	for i, t := range tensors {
		cut := len(shards) == 0 ||
			p.Split.MaxBytes > 0 && cur+t.Size > p.Split.MaxBytes && shards[len(shards)-1].Count > 0 ||
			p.Split.MaxTensors > 0 && i > 0 && i%p.Split.MaxTensors == 0
		if cut {
			shards = append(shards, gguf.Shard{Metadata: p.Header.Metadata, First: i})
			cur = 0
		}
		cur += t.Size
		shards[len(shards)-1].Count++
	}
	if len(shards) == 0 {
		shards = []gguf.Shard{{Metadata: p.Header.Metadata}}
	}
	prefix := strings.TrimSuffix(p.Path, ".safetensors")
	paths := make([]string, 0, len(shards)+1)
	for k := range shards {
		paths = append(paths, fmt.Sprintf("%s-%05d-of-%05d.safetensors", prefix, k+1, len(shards)))
	}
	return append(paths, p.Path+".index.json"), shards, nil
}

// safetensorsIndex is the index.json of shards: total_size (the tensor
// data bytes) and the weight_map from every tensor name to its shard's
// file name, in tensor order.
func safetensorsIndex(paths []string, shards []gguf.Shard, tensors []formats.Tensor) ([]byte, error) {
	var total int64
	var b strings.Builder
	sep := ""
	b.WriteString("{\n  \"metadata\": {\n    \"total_size\": TOTAL\n  },\n  \"weight_map\": {")
	for k, sh := range shards {
		file, err := json.Marshal(filepath.Base(paths[k]))
		if err != nil {
			return nil, err
		}
		for _, t := range tensors[sh.First : sh.First+sh.Count] {
			name, err := json.Marshal(t.Name)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "%s\n    %s: %s", sep, name, file)
			sep = ","
			total += t.Size
		}
	}
	b.WriteString("\n  }\n}\n")
	return []byte(strings.Replace(b.String(), "TOTAL", fmt.Sprint(total), 1)), nil
}

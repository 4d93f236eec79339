package text

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// Merges returns the tokenizer's BPE merges in rank order (first merges
// first), as merges.txt lists them.
func (t *CLIPTokenizer) Merges() [][2]string {
	type ranked struct {
		rank int32
		pair [2]string
	}
	list := make([]ranked, 0, len(t.merges))
	for k, m := range t.merges {
		a, b := int32(uint32(k>>32)), int32(uint32(k))
		list = append(list, ranked{m.rank, [2]string{t.decoder[a], t.decoder[b]}})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].rank < list[j].rank })
	out := make([][2]string, len(list))
	for i, r := range list {
		out[i] = r.pair
	}
	return out
}

// MetadataKV returns the tokenizer as the metadata entry a model embeds it
// in (CLIPMergesKey: the merges text, a string that fits GGUF and
// safetensors alike), so that CLIPTokenizerFromMetadata reads back the same
// tokenizer. A tokenizer whose vocabulary is not the one CLIP derives from
// its merges (a vocab.json with other ids) cannot be stored as merges
// alone, and is refused rather than embedded with different token ids.
func (t *CLIPTokenizer) MetadataKV() (formats.KV, error) {
	merges := t.Merges()
	derived, err := NewCLIPTokenizerFromMerges(merges)
	if err != nil {
		return formats.KV{}, err
	}
	if !maps.Equal(derived.vocab, t.vocab) {
		return formats.KV{}, fmt.Errorf("%w: its vocabulary is not the one CLIP derives from its %d merges (other token ids), so it cannot be embedded as merges", ErrTokenizer, len(merges))
	}
	var b strings.Builder
	b.WriteString("#version: 0.2\n")
	for i, m := range merges {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(m[0] + " " + m[1])
	}
	return formats.KV{Key: CLIPMergesKey, Type: formats.TypeString, Value: b.String()}, nil
}

package infer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// t5Shapes are the internal-name shapes of a T5 encoder under T5Prefix.
func t5Shapes(vocab, hidden, ff, layers, heads, headDim, buckets int) map[string][]int64 {
	p := T5Prefix
	h, f, in := int64(hidden), int64(ff), int64(heads*headDim)
	sh := map[string][]int64{
		p + "shared.weight": {int64(vocab), h},
		p + "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": {int64(buckets), int64(heads)},
		p + "encoder.final_layer_norm.weight":                                      {h},
	}
	for i := 0; i < layers; i++ {
		b := fmt.Sprintf("%sencoder.block.%d.layer.", p, i)
		sh[b+"0.layer_norm.weight"] = []int64{h}
		sh[b+"0.SelfAttention.q.weight"] = []int64{in, h}
		sh[b+"0.SelfAttention.k.weight"] = []int64{in, h}
		sh[b+"0.SelfAttention.v.weight"] = []int64{in, h}
		sh[b+"0.SelfAttention.o.weight"] = []int64{h, in}
		sh[b+"1.layer_norm.weight"] = []int64{h}
		sh[b+"1.DenseReluDense.wi_0.weight"] = []int64{f, h}
		sh[b+"1.DenseReluDense.wi_1.weight"] = []int64{f, h}
		sh[b+"1.DenseReluDense.wo.weight"] = []int64{h, f}
	}
	return sh
}

func TestDetectT5XXL(t *testing.T) {
	// T5-XXL v1.1 as Flux uses it: 24 layers, 4096 wide, 64 heads of 64, FF 10240, 32128 rows.
	c, err := DetectT5(t5Shapes(32128, 4096, 10240, 24, 64, 64, 32), nil, T5Prefix)
	if err != nil {
		t.Fatal(err)
	}
	want := T5Config{Component: "t5xxl", Prefix: T5Prefix, Embedding: T5Prefix + "shared.weight", Vocab: 32128, Hidden: 4096, FF: 10240,
		Layers: 24, Heads: 64, HeadDim: 64, Buckets: 32, MaxDistance: 128}
	if *c != want {
		t.Errorf("got %+v\nwant %+v", *c, want)
	}
	// A file with only encoder.embed_tokens.weight (HF ties it to shared.weight).
	sh := t5Shapes(100, 32, 64, 2, 4, 8, 32)
	sh[T5Prefix+"encoder.embed_tokens.weight"] = sh[T5Prefix+"shared.weight"]
	delete(sh, T5Prefix+"shared.weight")
	if c, err := DetectT5(sh, nil, T5Prefix); err != nil || c.Embedding != T5Prefix+"encoder.embed_tokens.weight" {
		t.Errorf("embed_tokens only: %+v, %v", c, err)
	}
	md := formats.Metadata{{Key: MetaT5MaxDistance, Type: formats.TypeUint32, Value: uint32(64)}}
	if c, err := DetectT5(t5Shapes(100, 32, 64, 2, 4, 8, 32), md, T5Prefix); err != nil || c.MaxDistance != 64 {
		t.Errorf("max distance metadata: %+v, %v", c, err)
	}
}

func TestDetectT5Errors(t *testing.T) {
	p := T5Prefix
	b1 := p + "encoder.block.1.layer."
	for _, c := range []struct {
		name string
		edit func(map[string][]int64)
		md   formats.Metadata
		want string
	}{
		{"no embedding", func(s map[string][]int64) { delete(s, p+"shared.weight") }, nil, "shared.weight"},
		{"no layers", func(s map[string][]int64) {
			for k := range s {
				if strings.Contains(k, "SelfAttention.q.") {
					delete(s, k)
				}
			}
		}, nil, "no layers"},
		{"no bias", func(s map[string][]int64) {
			delete(s, p+"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
		}, nil, "relative position bias"},
		{"heads do not split", func(s map[string][]int64) {
			s[p+"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = []int64{32, 5}
		}, nil, "5 heads"},
		{"odd buckets", func(s map[string][]int64) {
			s[p+"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = []int64{7, 4}
		}, nil, "buckets"},
		{"max distance in the exact range", nil, formats.Metadata{{Key: MetaT5MaxDistance, Type: formats.TypeUint32, Value: uint32(8)}}, "max distance"},
		{"heads metadata disagrees", nil, formats.Metadata{{Key: MetaT5Heads, Type: formats.TypeUint32, Value: uint32(8)}}, "4 heads"},
		{"relu feed-forward", func(s map[string][]int64) {
			for k := range s {
				if strings.Contains(k, "wi_0") {
					delete(s, k)
				}
			}
		}, nil, "gated-GELU"},
		{"layer 1 misshapen", func(s map[string][]int64) { s[b1+"1.DenseReluDense.wo.weight"] = []int64{32, 65} }, nil, b1 + "1.DenseReluDense.wo.weight"},
		{"layer 1 lacks a norm", func(s map[string][]int64) { delete(s, b1+"0.layer_norm.weight") }, nil, b1 + "0.layer_norm.weight"},
		{"no final norm", func(s map[string][]int64) { delete(s, p+"encoder.final_layer_norm.weight") }, nil, "final_layer_norm"},
		{"empty embedding", func(s map[string][]int64) { s[p+"shared.weight"] = []int64{0, 32} }, nil, "above 0"},
		{"q width is not the embedding's", func(s map[string][]int64) {
			s[p+"encoder.block.0.layer.0.SelfAttention.q.weight"] = []int64{32, 16}
		}, nil, "want [inner, 32]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sh := t5Shapes(100, 32, 64, 2, 4, 8, 32)
			if c.edit != nil {
				c.edit(sh)
			}
			_, err := DetectT5(sh, c.md, p)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}

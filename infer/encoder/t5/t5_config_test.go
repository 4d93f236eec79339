package t5

import (
	"fmt"
	"slices"
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
		{"a gap in the blocks", func(s map[string][]int64) {
			for k, v := range s {
				if strings.HasPrefix(k, b1) {
					s[strings.Replace(k, "block.1.", "block.2.", 1)] = v
					delete(s, k)
				}
			}
		}, nil, "but block 1 has no"},
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

// FuzzDetectT5 edits the shapes of a small T5 and checks that DetectT5
// never panics and that a configuration it accepts fits every shape the
// graph reads.
func FuzzDetectT5(f *testing.F) {
	f.Add([]byte{0, 1, 7}, uint16(3))
	f.Add([]byte{5, 0, 0, 9}, uint16(64))
	f.Add([]byte{}, uint16(0))
	base := t5Shapes(100, 32, 64, 2, 4, 8, 32)
	names := make([]string, 0, len(base))
	for k := range base {
		names = append(names, k)
	}
	slices.Sort(names)
	f.Fuzz(func(t *testing.T, edits []byte, v uint16) {
		sh := map[string][]int64{}
		for k, s := range base {
			sh[k] = append([]int64(nil), s...)
		}
		for i := 0; i+1 < len(edits); i += 2 {
			name := names[int(edits[i])%len(names)]
			s := sh[name]
			switch d := int(edits[i+1]); {
			case d == 255:
				delete(sh, name)
			case d >= 128:
				sh[name] = append(s, int64(v))
			case len(s) > 0:
				s[d%len(s)] = int64(v) - 8
			}
		}
		c, err := DetectT5(sh, nil, T5Prefix)
		if err != nil {
			return
		}
		if c.Vocab <= 0 || c.Hidden <= 0 || c.FF <= 0 || c.Heads <= 0 || c.HeadDim <= 0 || c.Layers <= 0 {
			t.Fatalf("accepted sizes %+v", c)
		}
		rel := sh[T5Prefix+"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
		if len(rel) != 2 || rel[0] != int64(c.Buckets) || rel[1] != int64(c.Heads) {
			t.Fatalf("bias %v for %+v", rel, c)
		}
		if e := sh[c.Embedding]; len(e) != 2 || e[0] != int64(c.Vocab) || e[1] != int64(c.Hidden) {
			t.Fatalf("embedding %v for %+v", e, c)
		}
		for i := 0; i < c.Layers; i++ {
			q := sh[fmt.Sprintf("%sencoder.block.%d.layer.0.SelfAttention.q.weight", T5Prefix, i)]
			if len(q) != 2 || q[0] != int64(c.Inner()) || q[1] != int64(c.Hidden) {
				t.Fatalf("block %d q %v for %+v", i, q, c)
			}
		}
	})
}

// TestDetectUMT5 reads UMT5-XXL's shapes (Wan's text encoder: a relative
// bias table in every layer, 256384 rows) and refuses a file whose later
// layer lost its table.
func TestDetectUMT5(t *testing.T) {
	sh := t5Shapes(256384, 4096, 10240, 3, 64, 64, 32)
	for i := 1; i < 3; i++ {
		sh[fmt.Sprintf("%sencoder.block.%d.layer.0.SelfAttention.relative_attention_bias.weight", T5Prefix, i)] = []int64{32, 64}
	}
	c, err := DetectT5(sh, nil, T5Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !c.LayerBias || c.Vocab != 256384 || c.Heads != 64 || c.Layers != 3 {
		t.Errorf("got %+v, want a per-layer bias, 256384 rows, 64 heads, 3 layers", *c)
	}
	if c.bias(2) != T5Prefix+"encoder.block.2.layer.0.SelfAttention.relative_attention_bias.weight" {
		t.Errorf("layer 2 reads %s", c.bias(2))
	}
	delete(sh, T5Prefix+"encoder.block.2.layer.0.SelfAttention.relative_attention_bias.weight")
	if _, err := DetectT5(sh, nil, T5Prefix); err == nil || !strings.Contains(err.Error(), "block.2.layer.0.SelfAttention.relative_attention_bias") {
		t.Errorf("a layer without its table: %v", err)
	}
	// T5 v1.1 (one table) reads layer 0's in every layer.
	c, err = DetectT5(t5Shapes(100, 32, 64, 2, 4, 8, 32), nil, T5Prefix)
	if err != nil || c.LayerBias || c.bias(1) != T5Prefix+"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight" {
		t.Errorf("T5 v1.1: %+v, %v", c, err)
	}
}

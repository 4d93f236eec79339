package t5

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// T5Prefix is where a T5 encoder's weights live among the internal names:
// sd-cli's prefix for --t5xxl files (text_encoders.t5xxl.transformer.), under
// which Hugging Face's names follow (shared.weight,
// encoder.block.N.layer.0.SelfAttention.q.weight, ...). llama.cpp's GGUF
// names (token_embd.weight, enc.blk.N.attn_q.weight) load there too:
// names.Convert renames them.
const T5Prefix = "text_encoders.t5xxl.transformer."

// Metadata keys for what a T5 encoder's shapes do not tell.
const (
	// MetaT5Heads is the T5 encoder's head count (default: the buckets
	// table's width, else inner width / 64 as sd.cpp assumes).
	MetaT5Heads = "sdtool.t5.num_heads"
	// MetaT5MaxDistance is the relative attention's max_distance (T5: 128).
	MetaT5MaxDistance = "sdtool.t5.relative_attention_max_distance"
)

// T5Config is a T5 encoder's configuration (T5 v1.1 / T5-XXL as Flux, SD3
// and Chroma use it), detected from tensor shapes.
type T5Config struct {
	// Component is the sd-cli flag of its standalone file ("t5xxl").
	Component string
	// Prefix is where its weights live among the internal names (T5Prefix).
	Prefix string
	// Embedding is the token embedding's internal name (Prefix+"shared.weight",
	// or Prefix+"encoder.embed_tokens.weight" when a file has only that).
	Embedding string
	// Vocab, Hidden (d_model), FF (d_ff) and Layers are the encoder's sizes.
	Vocab, Hidden, FF, Layers int
	// Heads and HeadDim (d_kv) split the attention's inner width Heads·HeadDim.
	Heads, HeadDim int
	// Buckets is relative_attention_num_buckets (32) and MaxDistance
	// relative_attention_max_distance (128).
	Buckets, MaxDistance int
	// LayerBias is set when every layer has its own relative_attention_bias
	// (UMT5, Wan's text encoder); T5 v1.1 shares layer 0's with all layers.
	LayerBias bool
}

// bias returns the name of the relative attention bias table layer i reads.
func (c *T5Config) bias(i int) string {
	if !c.LayerBias {
		i = 0
	}
	return fmt.Sprintf("%sencoder.block.%d.layer.0.SelfAttention.relative_attention_bias.weight", c.Prefix, i)
}

// Inner is the attention's inner width (q, k, v outputs): Heads·HeadDim.
func (c *T5Config) Inner() int { return c.Heads * c.HeadDim }

// t5LayerNormEps is T5LayerNorm's epsilon.
const t5LayerNormEps = 1e-6

// t5FFScale scales the gated FFN's product before wo, and wo's output back,
// as sd.cpp does (its Linear scale of 1/32) so that f16 activations of the
// product do not overflow; a power of two, so f32 results are unchanged.
const t5FFScale = 1.0 / 32

// DetectT5 reads the configuration of the T5 encoder whose weights sit
// under prefix in sh (internal names, PyTorch shapes), with md's overrides.
func DetectT5(sh map[string][]int64, md formats.Metadata, prefix string) (*T5Config, error) {
	s := infer.Shapes(sh)
	c := &T5Config{Component: "t5xxl", Prefix: prefix, MaxDistance: 128}
	for _, step := range []func(infer.Shapes, formats.Metadata) error{c.detectEmbedding, c.detectLayers, c.detectAttention, c.detectFF, c.checkLayers} {
		if err := step(s, md); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// detectEmbedding finds the token embedding (shared or the encoder's own)
// and reads the vocabulary and the width from it.
func (c *T5Config) detectEmbedding(s infer.Shapes, _ formats.Metadata) error {
	c.Embedding = c.Prefix + "shared.weight"
	if !s.Has(c.Embedding) && s.Has(c.Prefix+"encoder.embed_tokens.weight") {
		c.Embedding = c.Prefix + "encoder.embed_tokens.weight"
	}
	var err error
	if c.Vocab, err = s.Dim(c.Embedding, 0); err != nil {
		return err
	}
	if c.Hidden, err = s.Dim(c.Embedding, 1); err != nil {
		return err
	}
	if len(s[c.Embedding]) != 2 || c.Vocab <= 0 || c.Hidden <= 0 {
		return fmt.Errorf("tensor %q has shape %v, want [vocab, width] with both above 0", c.Embedding, s[c.Embedding])
	}
	return nil
}

// detectLayers counts the blocks and refuses a tensor past the first gap.
func (c *T5Config) detectLayers(s infer.Shapes, _ formats.Metadata) error {
	prefix := c.Prefix
	for s.Has(fmt.Sprintf("%sencoder.block.%d.layer.0.SelfAttention.q.weight", prefix, c.Layers)) {
		c.Layers++
	}
	if c.Layers == 0 {
		return fmt.Errorf("no layers under %sencoder.block (no encoder.block.0.layer.0.SelfAttention.q.weight)", prefix)
	}
	// A block past the first gap would be left out silently; sd.cpp counts
	// to the highest index and would miss the gap's tensors instead.
	for name := range s {
		rest, ok := strings.CutPrefix(name, prefix+"encoder.block.")
		if !ok {
			continue
		}
		if dot := strings.IndexByte(rest, '.'); dot > 0 {
			if n, err := strconv.Atoi(rest[:dot]); err == nil && n >= c.Layers {
				return fmt.Errorf("tensor %q is in block %d, but block %d has no %s", name, n, c.Layers, "layer.0.SelfAttention.q.weight")
			}
		}
	}
	return nil
}

// detectAttention reads the heads, their width and the relative position
// buckets from layer 0 (and the metadata that may restate them).
func (c *T5Config) detectAttention(s infer.Shapes, md formats.Metadata) error {
	b0 := c.Prefix + "encoder.block.0."
	q := b0 + "layer.0.SelfAttention.q.weight"
	inner, err := s.Dim(q, 0)
	if err != nil {
		return err
	}
	if in, _ := s.Dim(q, 1); in != c.Hidden {
		return fmt.Errorf("tensor %q has shape %v, want [inner, %d] (the token embedding's width)", q, s[q], c.Hidden)
	}
	rel := b0 + "layer.0.SelfAttention.relative_attention_bias.weight"
	if c.Buckets, err = s.Dim(rel, 0); err != nil {
		return fmt.Errorf("no relative position bias in layer 0: %w", err)
	}
	if c.Heads, err = s.Dim(rel, 1); err != nil {
		return err
	}
	if len(s[rel]) != 2 {
		return fmt.Errorf("tensor %q has shape %v, want [buckets, heads]", rel, s[rel])
	}
	if h, ok, err := infer.MetaInt(md, MetaT5Heads); err != nil {
		return err
	} else if ok && h != c.Heads {
		return fmt.Errorf("metadata %s = %d, but %q has %d heads", MetaT5Heads, h, rel, c.Heads)
	}
	if c.Heads <= 0 || inner%c.Heads != 0 {
		return fmt.Errorf("attention width %d does not split into %d heads", inner, c.Heads)
	}
	c.HeadDim = inner / c.Heads
	// Half the buckets per direction, half of those exact distances: the
	// logarithmic rest needs at least one exact bucket and a max distance
	// beyond the exact range.
	if c.Buckets < 4 || c.Buckets%2 != 0 {
		return fmt.Errorf("tensor %q has %d buckets, want an even count of at least 4", rel, c.Buckets)
	}
	if d, ok, err := infer.MetaInt(md, MetaT5MaxDistance); err != nil {
		return err
	} else if ok {
		c.MaxDistance = d
	}
	if c.MaxDistance <= c.Buckets/4 {
		return fmt.Errorf("relative attention max distance %d must exceed the %d exact distances of %d buckets", c.MaxDistance, c.Buckets/4, c.Buckets)
	}
	// UMT5 gives every layer a table of its own: the second layer having
	// one says so, and then every layer must.
	c.LayerBias = c.Layers > 1 && s.Has(c.Prefix+"encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight")
	return nil
}

// detectFF reads the gated-GELU feed-forward's width from layer 0.
func (c *T5Config) detectFF(s infer.Shapes, _ formats.Metadata) error {
	wi := c.Prefix + "encoder.block.0.layer.1.DenseReluDense.wi_0.weight"
	var err error
	if c.FF, err = s.Dim(wi, 0); err != nil {
		return fmt.Errorf("%w (only T5 v1.1's gated-GELU feed-forward is supported)", err)
	}
	if c.FF <= 0 {
		return fmt.Errorf("tensor %q has shape %v, want [ff, %d] with ff above 0", wi, s[wi], c.Hidden)
	}
	return nil
}

// checkLayers asks every layer for the tensors the graph reads, with the
// shapes of layer 0, so a truncated or mixed file fails here with the name.
func (c *T5Config) checkLayers(s infer.Shapes, _ formats.Metadata) error {
	inner, hidden, ff := int64(c.Heads*c.HeadDim), int64(c.Hidden), int64(c.FF)
	for i := 0; i < c.Layers; i++ {
		b := fmt.Sprintf("%sencoder.block.%d.", c.Prefix, i)
		if c.LayerBias {
			if err := s.Want(c.bias(i), []int64{int64(c.Buckets), int64(c.Heads)}); err != nil {
				return err
			}
		}
		for _, w := range []struct {
			name string
			want []int64
		}{
			{"layer.0.layer_norm.weight", []int64{hidden}},
			{"layer.0.SelfAttention.q.weight", []int64{inner, hidden}},
			{"layer.0.SelfAttention.k.weight", []int64{inner, hidden}},
			{"layer.0.SelfAttention.v.weight", []int64{inner, hidden}},
			{"layer.0.SelfAttention.o.weight", []int64{hidden, inner}},
			{"layer.1.layer_norm.weight", []int64{hidden}},
			{"layer.1.DenseReluDense.wi_0.weight", []int64{ff, hidden}},
			{"layer.1.DenseReluDense.wi_1.weight", []int64{ff, hidden}},
			{"layer.1.DenseReluDense.wo.weight", []int64{hidden, ff}},
		} {
			if err := s.Want(b+w.name, w.want); err != nil {
				return err
			}
		}
	}
	return s.Want(c.Prefix+"encoder.final_layer_norm.weight", []int64{hidden})
}

func init() {
	infer.RegisterEncoderKind("t5", infer.EncoderKind{
		Detect: func(s infer.Shapes, md formats.Metadata, e *infer.TextEncoder) (infer.EncoderConfig, error) {
			c, err := DetectT5(s, md, e.Prefix)
			if err != nil {
				return nil, err
			}
			c.Component = e.Component
			return c, nil
		},
		Tokenizer: loadT5KindTokenizer,
	})
}

// Input is the input flag of the encoder's standalone file.
func (c *T5Config) Input() string { return c.Component }

// Width is the width of the encoder's hidden states.
func (c *T5Config) Width() int { return c.Hidden }

// T5 returns the model's T5 encoder, nil when it has none.
func T5(c *infer.ModelConfig) *T5Config {
	for _, e := range c.Encoders {
		if t, ok := e.(*T5Config); ok {
			return t
		}
	}
	return nil
}

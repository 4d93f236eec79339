package zimage

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// MetaZImageAxes overrides the Z-Image DiT's RoPE axis widths ("32,48,48",
// which must add up to the head width); shapes do not tell them, and sd.cpp
// fixes them, so only narrow test models set it.
const MetaZImageAxes = "sdtool.z_image.axes_dim"

// ZImageConfig is a Z-Image DiT's configuration (Lumina 2's layout),
// detected from tensor shapes as sd.cpp does: widths from the embedders,
// depths from the highest block indices, heads from the QK norm's width.
type ZImageConfig struct {
	// Hidden is the transformer width (3840), split into Heads query heads
	// of HeadDim (30 × 128); KVHeads is the key/value heads (30: no grouping).
	Hidden, Heads, KVHeads, HeadDim int
	// Layers, NoiseRefiners and ContextRefiners are the block counts (30, 2, 2).
	Layers, NoiseRefiners, ContextRefiners int
	// FF is the SwiGLU feed-forward width (10240).
	FF int
	// InChannels and OutChannels are the latent channels (16); Patch the patch size (2).
	InChannels, OutChannels, Patch int
	// CapDim is the text encoder's width (Qwen3-4B's 2560).
	CapDim int
	// TimeDim is the time embedding's width, the modulation's input (256).
	TimeDim int
	// Axes are the RoPE widths of the three position axes and Theta their base (256).
	Axes  []int
	Theta float32
}

// LatentChannels is the latent width the DiT denoises.
func (c *ZImageConfig) LatentChannels() int { return c.InChannels }

// ContextWidth is the text tokens' width cap_embedder takes.
func (c *ZImageConfig) ContextWidth() int { return c.CapDim }

// zimageAxes and zimageTheta are Z-Image's RoPE (sd.cpp's fixed values).
var zimageAxes = []int{32, 48, 48}

const zimageTheta = 256

func init() {
	infer.RegisterNetworkDetector("zimage", func(s infer.Shapes, md formats.Metadata, cfg *infer.ModelConfig) error {
		c, err := detectZImage(s, md)
		if err != nil {
			return err
		}
		cfg.Network = c
		return nil
	})
}

// zimageBlockCount returns one more than the highest index N of a tensor named
// prefix+"N." + anything.
func zimageBlockCount(s infer.Shapes, prefix string) int {
	n := 0
	for name := range s {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		i, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '.'), 0)])
		if err == nil && i+1 > n {
			n = i + 1
		}
	}
	return n
}

// detectZImage reads a Z-Image DiT's configuration under model.diffusion_model.
func detectZImage(s infer.Shapes, md formats.Metadata) (*ZImageConfig, error) {
	p := infer.DmPrefix
	c := &ZImageConfig{Patch: 2, Theta: zimageTheta}
	pp := c.Patch * c.Patch
	for _, d := range []struct {
		name string
		dim  int
		dst  *int
	}{
		{"x_embedder.weight", 0, &c.Hidden}, {"x_embedder.weight", 1, &c.InChannels},
		{"final_layer.linear.weight", 0, &c.OutChannels},
		{"cap_embedder.1.weight", 1, &c.CapDim},
		{"t_embedder.mlp.2.weight", 0, &c.TimeDim},
		{"layers.0.attention.q_norm.weight", 0, &c.HeadDim},
		{"layers.0.feed_forward.w1.weight", 0, &c.FF},
	} {
		v, err := s.Dim(p+d.name, d.dim)
		if err != nil {
			return nil, err
		}
		*d.dst = v
	}
	if c.InChannels%pp != 0 || c.OutChannels != c.InChannels {
		return nil, fmt.Errorf("x_embedder takes %d values and final_layer.linear gives %d, want the same multiple of %d", c.InChannels, c.OutChannels, pp)
	}
	c.InChannels /= pp
	c.OutChannels /= pp
	if c.HeadDim <= 0 || c.Hidden%c.HeadDim != 0 {
		return nil, fmt.Errorf("width %d does not split into heads %d wide", c.Hidden, c.HeadDim)
	}
	c.Heads = c.Hidden / c.HeadDim
	qkv, err := s.Dim(p+"layers.0.attention.qkv.weight", 0)
	if err != nil {
		return nil, err
	}
	if c.KVHeads = (qkv/c.HeadDim - c.Heads) / 2; c.KVHeads < 1 || c.Heads%c.KVHeads != 0 || qkv != (c.Heads+2*c.KVHeads)*c.HeadDim {
		return nil, fmt.Errorf("tensor %q has %d rows, want (%d query heads + 2 × key/value heads dividing them) × %d", p+"layers.0.attention.qkv.weight", qkv, c.Heads, c.HeadDim)
	}
	c.Layers = zimageBlockCount(s, p+"layers.")
	c.NoiseRefiners = zimageBlockCount(s, p+"noise_refiner.")
	c.ContextRefiners = zimageBlockCount(s, p+"context_refiner.")
	if c.Layers == 0 {
		return nil, fmt.Errorf("no layers under %s", p)
	}
	if err := c.checkBlocks(s); err != nil {
		return nil, err
	}
	if c.Axes, err = zimageAxesFrom(md, c.HeadDim); err != nil {
		return nil, err
	}
	return c, nil
}

// checkBlocks checks that every block and the embedders have what the graph
// reads, in the shapes the configuration implies.
func (c *ZImageConfig) checkBlocks(s infer.Shapes) error {
	p := infer.DmPrefix
	h, ff, d, t := int64(c.Hidden), int64(c.FF), int64(c.HeadDim), int64(c.TimeDim)
	qkv := int64((c.Heads + 2*c.KVHeads) * c.HeadDim)
	type want struct {
		name  string
		shape []int64
	}
	block := func(b string, mod bool) []want {
		w := []want{
			{"attention.qkv.weight", []int64{qkv, h}}, {"attention.out.weight", []int64{h, int64(c.Heads * c.HeadDim)}},
			{"attention.q_norm.weight", []int64{d}}, {"attention.k_norm.weight", []int64{d}},
			{"feed_forward.w1.weight", []int64{ff, h}}, {"feed_forward.w2.weight", []int64{h, ff}}, {"feed_forward.w3.weight", []int64{ff, h}},
			{"attention_norm1.weight", []int64{h}}, {"attention_norm2.weight", []int64{h}},
			{"ffn_norm1.weight", []int64{h}}, {"ffn_norm2.weight", []int64{h}},
		}
		if mod {
			w = append(w, want{"adaLN_modulation.0.weight", []int64{4 * h, t}})
		}
		for i := range w {
			w[i].name = b + w[i].name
		}
		return w
	}
	all := []want{
		{"cap_embedder.0.weight", []int64{int64(c.CapDim)}}, {"cap_embedder.1.weight", []int64{h, int64(c.CapDim)}},
		{"t_embedder.mlp.2.weight", []int64{t, -1}}, {"final_layer.adaLN_modulation.1.weight", []int64{h, t}},
		{"final_layer.linear.weight", []int64{int64(c.Patch * c.Patch * c.OutChannels), h}},
	}
	for _, g := range []struct {
		name string
		n    int
		mod  bool
	}{{"context_refiner.", c.ContextRefiners, false}, {"noise_refiner.", c.NoiseRefiners, true}, {"layers.", c.Layers, true}} {
		for i := 0; i < g.n; i++ {
			all = append(all, block(fmt.Sprintf("%s%d.", g.name, i), g.mod)...)
		}
	}
	for _, w := range all {
		if w.shape[len(w.shape)-1] == -1 {
			if _, err := s.Dim(p+w.name, len(w.shape)-1); err != nil {
				return err
			}
			continue
		}
		if err := s.Want(p+w.name, w.shape); err != nil {
			return err
		}
	}
	for _, pad := range []string{"x_pad_token", "cap_pad_token"} {
		if n, err := formats.Elements(s[p+pad]); !s.Has(p+pad) || err != nil || n != h {
			return fmt.Errorf("tensor %q has shape %v, want %d values", p+pad, s[p+pad], h)
		}
	}
	return nil
}

// zimageAxesFrom returns the RoPE axes: Z-Image's, or MetaZImageAxes'.
func zimageAxesFrom(md formats.Metadata, headDim int) ([]int, error) {
	axes := zimageAxes
	if v, ok := md.String(MetaZImageAxes); ok {
		axes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 || n%2 != 0 {
				return nil, fmt.Errorf("metadata %s = %q: want three even widths such as 32,48,48", MetaZImageAxes, v)
			}
			axes = append(axes, n)
		}
	}
	sum := 0
	for _, a := range axes {
		sum += a
	}
	if len(axes) != 3 || sum != headDim {
		return nil, fmt.Errorf("RoPE axes %v do not add up to the head width %d (set %s)", axes, headDim, MetaZImageAxes)
	}
	return axes, nil
}

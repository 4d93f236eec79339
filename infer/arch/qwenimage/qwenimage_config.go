package qwenimage

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// MetaQwenImageAxes overrides the Qwen-Image DiT's RoPE axis widths
// ("16,56,56", which must add up to the head width): shapes do not tell
// them, and only a narrow test model needs another split.
const MetaQwenImageAxes = "sdtool.qwen_image.axes_dim"

// QwenImageConfig is a Qwen-Image MMDiT's configuration, detected from
// tensor shapes (depth from the highest transformer_blocks index, widths
// from the projections, the head width from the QK norms).
type QwenImageConfig struct {
	// Hidden is the transformer width (3072) and Heads·HeadDim splits it (24 × 128).
	Hidden, Heads, HeadDim int
	// Layers is the number of dual-stream blocks (60).
	Layers int
	// MLP is the feed-forward width (4·Hidden).
	MLP int
	// InChannels is the patchified input width (64: 16 latent channels of
	// 2×2 patches) and OutChannels the output's.
	InChannels, OutChannels int
	// Patch is the patch size (2).
	Patch int
	// ContextDim is the text tokens' width (Qwen2.5-VL 7B's 3584).
	ContextDim int
	// Axes are the RoPE widths of the three position axes (frame, row,
	// column) and Theta their base.
	Axes  []int
	Theta float32
	// ZeroCondT reports the Edit 2511 layout (a __index_timestep_zero__
	// marker tensor), which modulates reference-image tokens with timestep
	// 0; generate has no reference images, so it only refuses it.
	ZeroCondT bool
}

// LatentChannels is the VAE latent's channel count (InChannels / Patch²).
func (c *QwenImageConfig) LatentChannels() int { return c.InChannels / (c.Patch * c.Patch) }

// qwenImageAxes is Qwen-Image's RoPE split of a 128-wide head (sd.cpp's fixed axes_dim).
var qwenImageAxes = []int{16, 56, 56}

func init() {
	infer.RegisterNetworkDetector("qwen_image", func(s infer.Shapes, md formats.Metadata, cfg *infer.ModelConfig) error {
		c, err := detectQwenImage(s, md)
		if err != nil {
			return err
		}
		cfg.Network = c
		return nil
	})
}

// detectQwenImage reads a Qwen-Image DiT's configuration under model.diffusion_model.
func detectQwenImage(s infer.Shapes, md formats.Metadata) (*QwenImageConfig, error) {
	p := infer.DmPrefix
	c := &QwenImageConfig{Patch: 2, Theta: 10000}
	for _, d := range []struct {
		name string
		dim  int
		to   *int
	}{
		{"img_in.weight", 0, &c.Hidden}, {"img_in.weight", 1, &c.InChannels},
		{"txt_in.weight", 1, &c.ContextDim}, {"proj_out.weight", 0, &c.OutChannels},
		{"transformer_blocks.0.attn.norm_q.weight", 0, &c.HeadDim},
		{"transformer_blocks.0.img_mlp.net.0.proj.weight", 0, &c.MLP},
	} {
		v, err := s.Dim(p+d.name, d.dim)
		if err != nil {
			return nil, err
		}
		*d.to = v
	}
	for n := range s {
		rest, ok := strings.CutPrefix(n, p)
		if !ok {
			continue
		}
		c.ZeroCondT = c.ZeroCondT || strings.Contains(rest, "__index_timestep_zero__")
		if r, ok := strings.CutPrefix(rest, "transformer_blocks."); ok {
			i, err := strconv.Atoi(r[:max(strings.IndexByte(r, '.'), 0)])
			if err == nil && i+1 > c.Layers {
				c.Layers = i + 1
			}
		}
	}
	if c.Layers == 0 {
		return nil, fmt.Errorf("no transformer_blocks under %s", p)
	}
	if c.HeadDim <= 0 || c.Hidden%c.HeadDim != 0 {
		return nil, fmt.Errorf("width %d does not split into heads %d wide", c.Hidden, c.HeadDim)
	}
	c.Heads = c.Hidden / c.HeadDim
	if c.InChannels%(c.Patch*c.Patch) != 0 || c.OutChannels != c.InChannels {
		return nil, fmt.Errorf("img_in takes %d values and proj_out gives %d, want the same multiple of %d", c.InChannels, c.OutChannels, c.Patch*c.Patch)
	}
	if err := c.checkShapes(s); err != nil {
		return nil, err
	}
	axes, err := qwenImageAxesFrom(md, c.HeadDim)
	if err != nil {
		return nil, err
	}
	c.Axes = axes
	return c, nil
}

// checkShapes requires every tensor the graph reads, in block 0's shapes,
// so that a damaged file fails here, naming the tensor, rather than in ggml.
func (c *QwenImageConfig) checkShapes(s infer.Shapes) error {
	p := infer.DmPrefix
	h, mlp, d := int64(c.Hidden), int64(c.MLP), int64(c.HeadDim)
	top := []struct {
		name string
		want []int64
	}{
		{"txt_norm.weight", []int64{int64(c.ContextDim)}},
		{"txt_in.weight", []int64{h, int64(c.ContextDim)}},
		{"time_text_embed.timestep_embedder.linear_1.weight", []int64{h, 256}},
		{"time_text_embed.timestep_embedder.linear_2.weight", []int64{h, h}},
		{"norm_out.linear.weight", []int64{2 * h, h}},
		{"proj_out.weight", []int64{int64(c.OutChannels), h}},
	}
	for _, w := range top {
		if err := s.Want(p+w.name, w.want); err != nil {
			return err
		}
	}
	block := []struct {
		name string
		want []int64
	}{
		{"img_mod.1.weight", []int64{6 * h, h}}, {"txt_mod.1.weight", []int64{6 * h, h}},
		{"attn.to_q.weight", []int64{h, h}}, {"attn.to_k.weight", []int64{h, h}}, {"attn.to_v.weight", []int64{h, h}},
		{"attn.add_q_proj.weight", []int64{h, h}}, {"attn.add_k_proj.weight", []int64{h, h}}, {"attn.add_v_proj.weight", []int64{h, h}},
		{"attn.norm_q.weight", []int64{d}}, {"attn.norm_k.weight", []int64{d}},
		{"attn.norm_added_q.weight", []int64{d}}, {"attn.norm_added_k.weight", []int64{d}},
		{"attn.to_out.0.weight", []int64{h, h}}, {"attn.to_add_out.weight", []int64{h, h}},
		{"img_mlp.net.0.proj.weight", []int64{mlp, h}}, {"img_mlp.net.2.weight", []int64{h, mlp}},
		{"txt_mlp.net.0.proj.weight", []int64{mlp, h}}, {"txt_mlp.net.2.weight", []int64{h, mlp}},
	}
	for i := 0; i < c.Layers; i++ {
		for _, w := range block {
			if err := s.Want(fmt.Sprintf("%stransformer_blocks.%d.%s", p, i, w.name), w.want); err != nil {
				return err
			}
		}
	}
	return nil
}

// qwenImageAxesFrom returns the RoPE axes: the metadata's, else Qwen-Image's,
// which must add up to the head width.
func qwenImageAxesFrom(md formats.Metadata, headDim int) ([]int, error) {
	axes := qwenImageAxes
	if v, ok := md.String(MetaQwenImageAxes); ok {
		axes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 || n%2 != 0 {
				return nil, fmt.Errorf("metadata %s = %q: want three even widths such as 16,56,56", MetaQwenImageAxes, v)
			}
			axes = append(axes, n)
		}
	}
	sum := 0
	for _, a := range axes {
		sum += a
	}
	if len(axes) != 3 || sum != headDim {
		return nil, fmt.Errorf("RoPE axes %v do not add up to the head width %d (set %s)", axes, headDim, MetaQwenImageAxes)
	}
	return axes, nil
}

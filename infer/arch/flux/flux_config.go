package flux

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// MetaFluxAxes overrides the Flux DiT's RoPE axis widths ("16,56,56", which
// must add up to the head width); shapes do not tell them.
const MetaFluxAxes = "sdtool.flux.axes_dim"

// FluxConfig is a Flux.1 MMDiT's configuration, detected from tensor shapes
// as sd.cpp does (depths from the highest block index, widths from the
// projections, heads from the QK norm's width).
type FluxConfig struct {
	// Hidden is the transformer width (3072) and Heads·HeadDim splits it (24 × 128).
	Hidden, Heads, HeadDim int
	// Double and Single are the double- and single-stream block counts (19 and 38).
	Double, Single int
	// MLP is the feed-forward width (4·Hidden; Flux.2's 3·Hidden after its gate).
	MLP int
	// GatedMLP reports Flux.2's gated MLPs: their first layer (and
	// linear1's MLP part) is 2·MLP wide, SiLU of the first half times the
	// second (sd.cpp's use_mlp_silu_act); Flux.1's are GELU (tanh).
	GatedMLP bool
	// InChannels is the patchified input width (64: 16 latent channels of
	// 2×2 patches) and OutChannels the output's.
	InChannels, OutChannels int
	// Patch is the patch size (2).
	Patch int
	// ContextDim is the text tokens' width (T5-XXL's 4096) and VecDim the
	// pooled vector's (CLIP-L's 768; 0 when there is no vector_in).
	ContextDim, VecDim int
	// Guidance reports the guidance embedding (dev; schnell has none).
	Guidance bool
	// Axes are the RoPE widths of the position axes (Flux.1: index, row,
	// column; Flux.2 adds the text token's index) and Theta their base.
	Axes  []int
	Theta float32
}

// LatentChannels is the VAE latent's channel count (InChannels / Patch²).
func (c *FluxConfig) LatentChannels() int { return c.InChannels / (c.Patch * c.Patch) }

// fluxAxes is Flux.1's RoPE split of a 128-wide head.
var fluxAxes = []int{16, 56, 56}

func init() {
	infer.RegisterNetworkDetector("flux", func(s infer.Shapes, md formats.Metadata, cfg *infer.ModelConfig) error {
		c, err := detectFlux(s, md)
		if err != nil {
			return err
		}
		cfg.Network = c
		return nil
	})
}

// detectFlux reads a Flux DiT's configuration under model.diffusion_model.
func detectFlux(s infer.Shapes, md formats.Metadata) (*FluxConfig, error) {
	return detectFluxDiT(s, md, true)
}

// detectFluxDiT reads a Flux-layout DiT; modulated says whether every
// block has its own modulation layers (Flux.1; Chroma's are pruned).
func detectFluxDiT(s infer.Shapes, md formats.Metadata, modulated bool) (*FluxConfig, error) {
	return detectFluxLayout(s, md, modulated, fluxAxes)
}

// detectFluxLayout is detectFluxDiT with the RoPE axes the family uses
// when the metadata names none (Flux.1's 16 56 56, Flux.2's 32 32 32 32).
func detectFluxLayout(s infer.Shapes, md formats.Metadata, modulated bool, axes []int) (*FluxConfig, error) {
	p := infer.DmPrefix
	c := &FluxConfig{Patch: 2, Theta: 10000}
	var err error
	if c.Hidden, err = s.Dim(p+"txt_in.weight", 0); err != nil {
		return nil, err
	}
	if c.ContextDim, err = s.Dim(p+"txt_in.weight", 1); err != nil {
		return nil, err
	}
	if c.InChannels, err = s.Dim(p+"img_in.weight", 1); err != nil {
		return nil, err
	}
	if c.OutChannels, err = s.Dim(p+"final_layer.linear.weight", 0); err != nil {
		return nil, err
	}
	if s.Has(p + "vector_in.in_layer.weight") {
		if c.VecDim, err = s.Dim(p+"vector_in.in_layer.weight", 1); err != nil {
			return nil, err
		}
	}
	c.Guidance = s.Has(p + "guidance_in.in_layer.weight")
	for n := range s {
		rest, ok := strings.CutPrefix(n, p)
		if !ok {
			continue
		}
		for _, b := range []struct {
			prefix string
			count  *int
		}{{"double_blocks.", &c.Double}, {"single_blocks.", &c.Single}} {
			if r, ok := strings.CutPrefix(rest, b.prefix); ok {
				i, err := strconv.Atoi(r[:max(strings.IndexByte(r, '.'), 0)])
				if err == nil && i+1 > *b.count {
					*b.count = i + 1
				}
			}
		}
	}
	if c.Double == 0 {
		return nil, fmt.Errorf("no double_blocks under %s", p)
	}
	if c.HeadDim, err = s.Dim(p+"double_blocks.0.img_attn.norm.key_norm.scale", 0); err != nil {
		return nil, err
	}
	if c.HeadDim <= 0 || c.Hidden%c.HeadDim != 0 {
		return nil, fmt.Errorf("width %d does not split into heads %d wide", c.Hidden, c.HeadDim)
	}
	c.Heads = c.Hidden / c.HeadDim
	if c.MLP, err = s.Dim(p+"double_blocks.0.img_mlp.2.weight", 1); err != nil {
		return nil, err
	}
	up, err := s.Dim(p+"double_blocks.0.img_mlp.0.weight", 0)
	if err != nil {
		return nil, err
	}
	c.GatedMLP = up == 2*c.MLP
	if c.InChannels%(c.Patch*c.Patch) != 0 || c.OutChannels != c.InChannels {
		return nil, fmt.Errorf("img_in takes %d values and final_layer.linear gives %d, want the same multiple of %d", c.InChannels, c.OutChannels, c.Patch*c.Patch)
	}
	if err := c.checkBlocks(s, modulated, up); err != nil {
		return nil, err
	}
	if err := c.detectAxes(md, axes); err != nil {
		return nil, err
	}
	return c, nil
}

// checkBlocks asks every block for what the graph reads, in the shapes
// block 0 has (mlpIn: the MLP's first width, doubled when gated).
func (c *FluxConfig) checkBlocks(s infer.Shapes, modulated bool, mlpIn int) error {
	p := infer.DmPrefix
	h, mlp, in := int64(c.Hidden), int64(c.MLP), int64(mlpIn)
	for i := 0; i < c.Double; i++ {
		for _, st := range []string{"img", "txt"} {
			b := fmt.Sprintf("%sdouble_blocks.%d.%s_", p, i, st)
			for _, w := range []struct {
				name string
				want []int64
			}{
				{"attn.qkv.weight", []int64{3 * h, h}},
				{"attn.norm.query_norm.scale", []int64{int64(c.HeadDim)}},
				{"attn.norm.key_norm.scale", []int64{int64(c.HeadDim)}},
				{"attn.proj.weight", []int64{h, h}},
				{"mlp.0.weight", []int64{in, h}},
				{"mlp.2.weight", []int64{h, mlp}},
			} {
				if err := s.Want(b+w.name, w.want); err != nil {
					return err
				}
			}
			if err := s.WantIf(modulated, b+"mod.lin.weight", []int64{6 * h, h}); err != nil {
				return err
			}
		}
	}
	for i := 0; i < c.Single; i++ {
		b := fmt.Sprintf("%ssingle_blocks.%d.", p, i)
		for _, w := range []struct {
			name string
			want []int64
		}{
			{"linear1.weight", []int64{3*h + in, h}},
			{"linear2.weight", []int64{h, h + mlp}},
			{"norm.query_norm.scale", []int64{int64(c.HeadDim)}},
			{"norm.key_norm.scale", []int64{int64(c.HeadDim)}},
		} {
			if err := s.Want(b+w.name, w.want); err != nil {
				return err
			}
		}
		if err := s.WantIf(modulated, b+"modulation.lin.weight", []int64{3 * h, h}); err != nil {
			return err
		}
	}
	return nil
}

// detectAxes sets the RoPE axes: the family's, or the metadata's; they
// must add up to the head width.
func (c *FluxConfig) detectAxes(md formats.Metadata, axes []int) error {
	c.Axes = axes
	if v, ok := md.String(MetaFluxAxes); ok {
		c.Axes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 || n%2 != 0 {
				return fmt.Errorf("metadata %s = %q: want %d even widths such as %s", MetaFluxAxes, v, len(axes), axesString(axes))
			}
			c.Axes = append(c.Axes, n)
		}
	}
	sum := 0
	for _, a := range c.Axes {
		sum += a
	}
	if len(c.Axes) != len(axes) || sum != c.HeadDim {
		return fmt.Errorf("RoPE axes %v do not add up to the head width %d (set %s)", c.Axes, c.HeadDim, MetaFluxAxes)
	}
	return nil
}

// axesString spells RoPE axes as the metadata key takes them ("16,56,56").
func axesString(axes []int) string {
	s := make([]string, len(axes))
	for i, a := range axes {
		s[i] = strconv.Itoa(a)
	}
	return strings.Join(s, ",")
}

package sd

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// The LDM UNet's configuration (SD 1.x/2.x/XL), detected from its shapes
// and the metadata overrides: the network kind "unet".

// Metadata keys of the UNet that detection from shapes cannot tell.
const (
	// MetaUNetHeads is the UNet's attention head count at every level (SD 1.x: 8).
	MetaUNetHeads = "sdtool.unet.num_heads"
	// MetaUNetHeadDim is the UNet's attention head width (SD 2.x: 64); used when MetaUNetHeads is absent.
	MetaUNetHeadDim = "sdtool.unet.head_dim"
)

func init() {
	infer.RegisterNetworkDetector("unet", func(s infer.Shapes, md formats.Metadata, cfg *infer.ModelConfig) error {
		u := &UNetConfig{}
		cfg.Network = u
		return detectUNet(s, md, u)
	})
}

// UNetConfig is an LDM UNet's configuration, detected from tensor shapes.
type UNetConfig struct {
	// InChannels and OutChannels are the latent channels (4 for SD).
	InChannels, OutChannels int
	// ModelChannels is the width of the first level (SD: 320).
	ModelChannels int
	// ChannelMult multiplies ModelChannels per level (SD: 1 2 4 4).
	ChannelMult []int
	// NumResBlocks is the number of residual blocks per input level (SD: 2).
	NumResBlocks int
	// TransformerDepth is the transformer depth per level (0: no attention).
	TransformerDepth []int
	// MiddleDepth is the middle block's transformer depth.
	MiddleDepth int
	// ContextDim is the cross-attention context width (SD1: 768, SD2: 1024, SDXL: 2048).
	ContextDim int
	// NumHeads is the head count at every level; 0 when HeadDim applies.
	NumHeads int
	// HeadDim is the head width when NumHeads is 0.
	HeadDim int
	// LinearProj reports linear proj_in/proj_out (SD 2.x, SDXL) instead of 1x1 convs.
	LinearProj bool
	// ADMChannels is the width of the class-embedding input (SDXL's 2816
	// conditioning vector, label_emb), 0 when there is none.
	ADMChannels int
}

// heads returns the head count of a transformer at width ch.
func (c *UNetConfig) heads(ch int) int {
	if c.NumHeads > 0 {
		return c.NumHeads
	}
	return max(ch/c.HeadDim, 1)
}

// LatentChannels is the latent width the UNet denoises.
func (c *UNetConfig) LatentChannels() int { return c.OutChannels }

// VectorWidth returns the width of the conditioning vector the UNet takes.
func (c *UNetConfig) VectorWidth() int { return c.ADMChannels }

// ContextWidth returns the width of the context the UNet attends to.
func (c *UNetConfig) ContextWidth() int { return c.ContextDim }

func detectUNet(s infer.Shapes, md formats.Metadata, c *UNetConfig) error {
	p := infer.DmPrefix
	var err error
	if c.ModelChannels, err = s.Dim(p+"input_blocks.0.0.weight", 0); err != nil {
		return err
	}
	if c.InChannels, err = s.Dim(p+"input_blocks.0.0.weight", 1); err != nil {
		return err
	}
	if c.OutChannels, err = s.Dim(p+"out.2.weight", 0); err != nil {
		return err
	}
	blocks, err := c.detectLevels(s)
	if err != nil {
		return err
	}
	if s.Has(p + "label_emb.0.0.weight") {
		if c.ADMChannels, err = s.Dim(p+"label_emb.0.0.weight", 1); err != nil {
			return err
		}
	}
	c.MiddleDepth = countBlocks(s, p+"middle_block.1.transformer_blocks.")
	if err := c.detectContext(s, blocks); err != nil {
		return err
	}
	return c.detectHeads(md)
}

// detectLevels walks the input blocks (residual blocks until a
// downsampler ends a level) into the channel multipliers, the transformer
// depths and the residual blocks per level; it returns the input blocks'
// count.
func (c *UNetConfig) detectLevels(s infer.Shapes) (int, error) {
	p, mc := infer.DmPrefix, c.ModelChannels
	idx, res := 1, 0
	var mult, depth []int
	for {
		b := fmt.Sprintf("%sinput_blocks.%d.", p, idx)
		if s.Has(b + "0.op.weight") {
			if res == 0 {
				return 0, fmt.Errorf("input block %d downsamples an empty level", idx)
			}
			if c.NumResBlocks == 0 {
				c.NumResBlocks = res
			} else if res != c.NumResBlocks {
				return 0, fmt.Errorf("levels with %d and %d residual blocks", c.NumResBlocks, res)
			}
			res = 0
			idx++
			continue
		}
		if !s.Has(b + "0.in_layers.2.weight") {
			break
		}
		out, err := s.Dim(b+"0.in_layers.2.weight", 0)
		if err != nil {
			return 0, err
		}
		if out%mc != 0 {
			return 0, fmt.Errorf("input block %d has %d channels, not a multiple of %d", idx, out, mc)
		}
		d := countBlocks(s, b+"1.transformer_blocks.")
		if res == 0 {
			mult = append(mult, out/mc)
			depth = append(depth, d)
		} else if mult[len(mult)-1] != out/mc || depth[len(depth)-1] != d {
			return 0, fmt.Errorf("input block %d differs from the rest of its level", idx)
		}
		res++
		idx++
	}
	if len(mult) == 0 {
		return 0, fmt.Errorf("no residual blocks under %sinput_blocks", p)
	}
	if c.NumResBlocks == 0 {
		c.NumResBlocks = res
	} else if res != c.NumResBlocks {
		return 0, fmt.Errorf("the last level has %d residual blocks, the others %d", res, c.NumResBlocks)
	}
	c.ChannelMult, c.TransformerDepth = mult, depth
	return idx, nil
}

// detectContext reads the context width and the projection kind from the
// first transformer (the middle block's, else the first input block's).
func (c *UNetConfig) detectContext(s infer.Shapes, blocks int) error {
	p := infer.DmPrefix
	pre := p + "middle_block.1."
	if k, ok := s[pre+"transformer_blocks.0.attn2.to_k.weight"]; ok && len(k) == 2 {
		c.ContextDim = int(k[1])
	}
	if w, ok := s[pre+"proj_in.weight"]; ok {
		c.LinearProj = len(w) == 2
	}
	for i := 1; i < blocks && c.ContextDim == 0; i++ {
		b := fmt.Sprintf("%sinput_blocks.%d.1.", p, i)
		if k, ok := s[b+"transformer_blocks.0.attn2.to_k.weight"]; ok && len(k) == 2 {
			c.ContextDim = int(k[1])
			c.LinearProj = len(s[b+"proj_in.weight"]) == 2
		}
	}
	if c.ContextDim == 0 {
		return fmt.Errorf("no cross-attention found (attn2.to_k)")
	}
	return nil
}

// detectHeads sets the heads (or their width) from the metadata, else as
// SD 1.x (8 heads) or SD 2.x (64 channels each), and checks that every
// level's channels split into them and into GroupNorm's 32 groups.
func (c *UNetConfig) detectHeads(md formats.Metadata) error {
	heads, hok, err := infer.MetaInt(md, MetaUNetHeads)
	if err != nil {
		return err
	}
	hd, dok, err := infer.MetaInt(md, MetaUNetHeadDim)
	if err != nil {
		return err
	}
	switch {
	case hok:
		c.NumHeads = heads
	case dok:
		c.HeadDim = hd
	case c.ContextDim == 768:
		c.NumHeads = 8 // SD 1.x: num_heads 8
	default:
		c.HeadDim = 64 // SD 2.x: num_head_channels 64
	}
	mc := c.ModelChannels
	for level, m := range c.ChannelMult {
		ch := m * mc
		if c.TransformerDepth[level] == 0 {
			continue
		}
		if c.NumHeads > 0 && ch%c.NumHeads != 0 || c.NumHeads == 0 && ch%c.HeadDim != 0 {
			if !hok && !dok {
				return missingHeads(level, ch, c)
			}
			return fmt.Errorf("level %d: %d channels do not split into heads (%d heads, head dim %d)", level, ch, c.NumHeads, c.HeadDim)
		}
	}
	for level, m := range c.ChannelMult {
		if (m*mc)%32 != 0 {
			return fmt.Errorf("level %d: %d channels is not a multiple of GroupNorm's 32 groups", level, m*mc)
		}
	}
	return nil
}

// missingHeads is the error for a UNet whose width does not fit the head
// layout assumed without metadata: it names the keys and how to add them.
func missingHeads(level, ch int, c *UNetConfig) error {
	assumed := fmt.Sprintf("%d heads (SD 1.x's count, for a 768-wide context)", c.NumHeads)
	if c.NumHeads == 0 {
		assumed = fmt.Sprintf("heads %d wide (SD 2.x's width)", c.HeadDim)
	}
	return fmt.Errorf("level %d: %d channels do not split into %s, assumed because the model has no %s or %s metadata; "+
		"add the head count with `sdtool convert -m MODEL -o OUT.gguf --metadata %s=N` (or the width with --metadata %s=N)",
		level, ch, assumed, MetaUNetHeads, MetaUNetHeadDim, MetaUNetHeads, MetaUNetHeadDim)
}

// countBlocks counts prefix0., prefix1., ... that have a norm1 weight.
func countBlocks(s infer.Shapes, prefix string) int {
	n := 0
	for s.Has(fmt.Sprintf("%s%d.norm1.weight", prefix, n)) {
		n++
	}
	return n
}

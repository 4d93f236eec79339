package wan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// WanConfig is a Wan 2.1/2.2 video DiT's configuration, detected from
// tensor shapes: sd.cpp fixes the widths by the block count (30: 1.3B or
// TI2V-5B, 40: 14B), sdtool reads them from the weights, so a synthetic
// model of any depth runs.
type WanConfig struct {
	// Prefix is where its weights live (model.diffusion_model., or
	// model.high_noise_diffusion_model. for Wan 2.2 A14B's first expert).
	Prefix string
	// Hidden is the transformer width (1536, 5120, 3072), Heads·HeadDim its split (12×128, 40×128, 24×128).
	Hidden, Heads, HeadDim int
	// Blocks is the block count and FF the feed-forward width.
	Blocks, FF int
	// InChannels and OutChannels are the latent channels the patch
	// embedding takes and the head gives (16; 48 for TI2V-5B).
	InChannels, OutChannels int
	// PatchT, PatchH and PatchW are the patch sizes over time, rows and columns (1, 2, 2).
	PatchT, PatchH, PatchW int
	// TextDim is the width of the text tokens (UMT5-XXL's 4096) and FreqDim
	// the sinusoidal time embedding's (256).
	TextDim, FreqDim int
	// CrossNorm reports the layer norm before cross-attention (norm3, with weight and bias).
	CrossNorm bool
	// Axes are the RoPE widths of the three position axes (frame, row, column) and Theta their base.
	Axes  []int
	Theta float32
	// HighNoise is Wan 2.2 A14B's high-noise expert (under
	// wanHighNoisePrefix), which runs the first steps; nil for none.
	HighNoise *WanConfig
}

// wanHighNoisePrefix is where sd-cli loads --high-noise-diffusion-model.
const wanHighNoisePrefix = "model.high_noise_diffusion_model."

// LatentChannels is the latent's channel count (the head's output per patch cell).
func (c *WanConfig) LatentChannels() int { return c.OutChannels }

// wanAxes is Wan's RoPE split of a 128-wide head: the frame axis gets
// what the two spatial axes leave, d - 4·(d/6), as Wan's rope_params do.
func wanAxes(d int) []int {
	s := 2 * (d / 6)
	return []int{d - 2*s, s, s}
}

// wanEps is the epsilon of Wan's layer norms and QK RMS norms.
const wanEps = 1e-6

func init() {
	infer.RegisterNetworkDetector("wan", func(s infer.Shapes, md formats.Metadata, cfg *infer.ModelConfig) error {
		c, err := detectWan(s, infer.DmPrefix)
		if err != nil {
			return err
		}
		if s.HasPrefix(wanHighNoisePrefix) {
			if c.HighNoise, err = detectWan(s, wanHighNoisePrefix); err != nil {
				return fmt.Errorf("high-noise expert: %w", err)
			}
			h := c.HighNoise
			if h.InChannels != c.InChannels || h.OutChannels != c.OutChannels || h.TextDim != c.TextDim || h.PatchH != c.PatchH {
				return fmt.Errorf("the high-noise expert takes %d channels and %d-wide text in %d-cell patches, the model %d, %d and %d",
					h.InChannels, h.TextDim, h.PatchH, c.InChannels, c.TextDim, c.PatchH)
			}
		}
		cfg.Network = c
		return nil
	})
}

// wanBlockCount is the number of blocks under prefix+"blocks.": one more
// than the highest index, as sd.cpp counts them.
func wanBlockCount(s infer.Shapes, prefix string) int {
	n := 0
	for name := range s {
		r, ok := strings.CutPrefix(name, prefix+"blocks.")
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(r[:max(strings.IndexByte(r, '.'), 0)]); err == nil && i+1 > n {
			n = i + 1
		}
	}
	return n
}

// detectWan reads a Wan DiT's configuration under prefix.
func detectWan(s infer.Shapes, prefix string) (*WanConfig, error) {
	p := prefix
	c := &WanConfig{Prefix: p, Theta: 10000}
	pe := p + "patch_embedding.weight"
	sh, ok := s[pe]
	if !ok {
		return nil, fmt.Errorf("model has no tensor %q", pe)
	}
	var err error
	if c.Hidden, err = s.Dim(p+"text_embedding.0.weight", 0); err != nil {
		return nil, err
	}
	if c.TextDim, err = s.Dim(p+"text_embedding.0.weight", 1); err != nil {
		return nil, err
	}
	// [dim, C, pt, ph, pw] as trained, or [dim·C, pt, ph, pw] as sd.cpp
	// holds a Conv3d kernel in four dimensions (its GGUF files).
	switch {
	case len(sh) == 5 && int(sh[0]) == c.Hidden:
		c.InChannels, c.PatchT, c.PatchH, c.PatchW = int(sh[1]), int(sh[2]), int(sh[3]), int(sh[4])
	case len(sh) == 4 && c.Hidden > 0 && int(sh[0])%c.Hidden == 0:
		c.InChannels, c.PatchT, c.PatchH, c.PatchW = int(sh[0])/c.Hidden, int(sh[1]), int(sh[2]), int(sh[3])
	default:
		return nil, fmt.Errorf("tensor %q has shape %v, want [%d, channels, 1, 2, 2] (a 3-D patch embedding)", pe, sh, c.Hidden)
	}
	if c.InChannels < 1 || c.PatchT != 1 || c.PatchH != c.PatchW || c.PatchH < 1 {
		return nil, fmt.Errorf("tensor %q has shape %v: want channels of 1 frame of square cells", pe, sh)
	}
	if c.FreqDim, err = s.Dim(p+"time_embedding.0.weight", 1); err != nil {
		return nil, err
	}
	out, err := s.Dim(p+"head.head.weight", 0)
	if err != nil {
		return nil, err
	}
	cells := c.PatchT * c.PatchH * c.PatchW
	if out%cells != 0 {
		return nil, fmt.Errorf("tensor %q gives %d values per token, not a multiple of the %d patch cells", p+"head.head.weight", out, cells)
	}
	c.OutChannels = out / cells
	if c.Blocks = wanBlockCount(s, p); c.Blocks == 0 {
		return nil, fmt.Errorf("no blocks under %sblocks", p)
	}
	if c.HeadDim, err = wanHeadDim(p, c.Hidden); err != nil {
		return nil, err
	}
	c.Heads = c.Hidden / c.HeadDim
	if c.FF, err = s.Dim(p+"blocks.0.ffn.0.weight", 0); err != nil {
		return nil, err
	}
	c.CrossNorm = s.Has(p + "blocks.0.norm3.weight")
	if err := checkWanShapes(s, c); err != nil {
		return nil, err
	}
	c.Axes = wanAxes(c.HeadDim)
	return c, refuseWanI2V(s, c)
}

// refuseWanI2V refuses the image-conditioned Wan DiTs, whose inputs
// generate does not build (TI2V-5B's image-to-video needs none: its init
// image is a held latent frame).
func refuseWanI2V(s infer.Shapes, c *WanConfig) error {
	p := c.Prefix
	switch {
	case s.HasPrefix(p+"img_emb.") || s.Has(p+"blocks.0.cross_attn.k_img.weight"):
		return fmt.Errorf("an image-to-video DiT (Wan 2.1 I2V or FLF2V: %simg_emb, cross_attn.k_img) is not supported: "+
			"it needs a CLIP vision (ViT-H) encoder for the init image, the img_emb projection of its tokens, "+
			"the image cross-attention (k_img, v_img) and the %d-channel input (a mask and the VAE-encoded frames beside the noise)", p, c.InChannels)
	case c.InChannels != c.OutChannels:
		return fmt.Errorf("an image-to-video DiT (Wan 2.2 I2V-A14B: %d input channels for %d latent ones) is not supported: "+
			"it needs the %d-channel input (a mask and the VAE-encoded frames beside the noise)", c.InChannels, c.OutChannels, c.InChannels)
	}
	return nil
}

// wanHeadDim is the head width: 128 in every released Wan (the RoPE axes
// 44, 42, 42 need it), so the head count is the width over 128; metadata
// does not carry it and the norms span the whole width.
func wanHeadDim(p string, hidden int) (int, error) {
	const d = 128
	if hidden <= 0 || hidden%d != 0 {
		return 0, fmt.Errorf("tensor %q: width %d does not split into heads of %d", p+"patch_embedding.weight", hidden, d)
	}
	return d, nil
}

// checkWanShapes checks that every tensor the graph reads is there in the
// shape the configuration implies, so a truncated file fails with the name.
func checkWanShapes(s infer.Shapes, c *WanConfig) error {
	h, ff := int64(c.Hidden), int64(c.FF)
	want := map[string][]int64{
		"text_embedding.0.weight":  {h, int64(c.TextDim)},
		"text_embedding.2.weight":  {h, h},
		"time_embedding.0.weight":  {h, int64(c.FreqDim)},
		"time_embedding.2.weight":  {h, h},
		"time_projection.1.weight": {6 * h, h},
		"head.head.weight":         {int64(c.OutChannels * c.PatchT * c.PatchH * c.PatchW), h},
		"head.modulation":          {1, 2, h},
	}
	for i := 0; i < c.Blocks; i++ {
		b := fmt.Sprintf("blocks.%d.", i)
		for _, a := range []string{"self_attn.", "cross_attn."} {
			for _, l := range []string{"q", "k", "v", "o"} {
				want[b+a+l+".weight"] = []int64{h, h}
			}
			want[b+a+"norm_q.weight"] = []int64{h}
			want[b+a+"norm_k.weight"] = []int64{h}
		}
		want[b+"modulation"] = []int64{1, 6, h}
		want[b+"ffn.0.weight"] = []int64{ff, h}
		want[b+"ffn.2.weight"] = []int64{h, ff}
		if c.CrossNorm {
			want[b+"norm3.weight"] = []int64{h}
		}
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names) // the first missing tensor in a stable order
	for _, n := range names {
		if err := s.Want(c.Prefix+n, want[n]); err != nil {
			return err
		}
	}
	return nil
}

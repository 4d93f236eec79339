package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/native"
)

// The LDM AutoencoderKL's decoder (and encoder for img2img) on ggml: the
// VAE kind "kl" (SD 1.x/2.x/XL, and Flux.1's 16-channel one).

// vaeNormEps is the AutoencoderKL's GroupNorm epsilon.
const vaeNormEps = 1e-6

// KLConfig is an LDM AutoencoderKL's layout (VAEConfig.Layout).
type KLConfig struct {
	// Levels is the number of resolution levels (SD: 4, so 8x downsampling).
	Levels int
	// BlocksPerLevel is the decoder's residual blocks per level (SD: 3).
	BlocksPerLevel int
	// QuantConv reports quant_conv/post_quant_conv (absent in Flux's VAE).
	QuantConv bool
}

func init() {
	vaeKinds["kl"] = vaeKind{detect: detectKL, isWeight: isKLWeight, encoderParts: []string{"encoder.", "quant_conv."},
		decode: func(g *builder, c *VAEConfig, z native.Tensor) native.Tensor {
			return g.vaeDecode(c.Layout.(*KLConfig), z)
		},
		encode: func(g *builder, c *VAEConfig, x native.Tensor) native.Tensor {
			return g.vaeEncode(c.Layout.(*KLConfig), x)
		},
	}
}

// isKLWeight reports an AutoencoderKL tensor under first_stage_model.
func isKLWeight(name string) bool {
	for _, p := range []string{"encoder.", "decoder.", "quant_conv.", "post_quant_conv."} {
		if hasPrefix(name, vaePfx+p) {
			return true
		}
	}
	return false
}

// detectKL reads an AutoencoderKL's configuration from its shapes.
func detectKL(s shapes, c *VAEConfig) error {
	p := vaePfx
	kl := &KLConfig{}
	c.Layout = kl
	var err error
	if c.ZChannels, err = s.dim(p+"decoder.conv_in.weight", 1); err != nil {
		return err
	}
	for s.has(fmt.Sprintf("%sdecoder.up.%d.block.0.conv1.weight", p, kl.Levels)) {
		kl.Levels++
	}
	if kl.Levels == 0 {
		return fmt.Errorf("no decoder levels under %sdecoder.up", p)
	}
	for s.has(fmt.Sprintf("%sdecoder.up.0.block.%d.conv1.weight", p, kl.BlocksPerLevel)) {
		kl.BlocksPerLevel++
	}
	c.HasEncoder = s.has(p + "encoder.conv_in.weight")
	kl.QuantConv = s.has(p + "post_quant_conv.weight")
	return nil
}

// vaeRes is the VAE's ResnetBlock.
func (g *builder) vaeRes(x native.Tensor, p string) native.Tensor {
	h := g.conv2d(g.c.SiLU(g.groupNorm(x, p+"norm1", vaeNormEps)), p+"conv1", 1)
	h = g.conv2d(g.c.SiLU(g.groupNorm(h, p+"norm2", vaeNormEps)), p+"conv2", 1)
	if g.has(p + "nin_shortcut.weight") {
		x = g.conv2d(x, p+"nin_shortcut", 1)
	}
	return g.c.Add(h, x)
}

// vaeAttn is the VAE's single-head AttnBlock over all positions.
func (g *builder) vaeAttn(x native.Tensor, p string) native.Tensor {
	ne := x.Ne()
	h := g.groupNorm(x, p+"norm", vaeNormEps)
	q := toTokens(g.c, g.conv2d(h, p+"q", 1))
	k := toTokens(g.c, g.conv2d(h, p+"k", 1))
	v := toTokens(g.c, g.conv2d(h, p+"v", 1))
	a := fromTokens(g.c, attention(g.c, q, k, v, 1, false), ne[0], ne[1])
	return g.c.Add(g.conv2d(a, p+"proj_out", 1), x)
}

func (g *builder) vaeMid(x native.Tensor, p string) native.Tensor {
	x = g.vaeRes(x, p+"mid.block_1.")
	x = g.vaeAttn(x, p+"mid.attn_1.")
	return g.vaeRes(x, p+"mid.block_2.")
}

// vaeDecode turns a VAE latent z [w, h, Z, N] (the diffusion latent
// already unscaled and unshifted) into an image [8w, 8h, 3, N], nominally in [-1, 1] (unclamped,
// as sd.cpp hands it to its PNG conversion; see ImageFromCHW).
func (g *builder) vaeDecode(cfg *KLConfig, z native.Tensor) native.Tensor {
	p := vaePfx
	x := z
	if cfg.QuantConv {
		x = g.conv2d(x, p+"post_quant_conv", 1)
	}
	x = g.conv2d(x, p+"decoder.conv_in", 1)
	x = g.vaeMid(x, p+"decoder.")
	for level := cfg.Levels - 1; level >= 0; level-- {
		for i := 0; i < cfg.BlocksPerLevel; i++ {
			x = g.vaeRes(x, fmt.Sprintf("%sdecoder.up.%d.block.%d.", p, level, i))
		}
		if level != 0 {
			x = g.conv2d(g.c.UpscaleNearest(x, 2), fmt.Sprintf("%sdecoder.up.%d.upsample.conv", p, level), 1)
		}
	}
	return g.conv2d(g.c.SiLU(g.groupNorm(x, p+"decoder.norm_out", vaeNormEps)), p+"decoder.conv_out", 1)
}

// vaeEncode turns an image [W, H, 3, N] in [-1, 1] into the moments of
// the latent distribution [W/8, H/8, 2Z, N]: Z channels of mean, then Z of
// log-variance (before the scale factor).
func (g *builder) vaeEncode(cfg *KLConfig, img native.Tensor) native.Tensor {
	p := vaePfx
	x := g.conv2d(img, p+"encoder.conv_in", 1)
	for level := 0; level < cfg.Levels; level++ {
		for i := 0; g.has(fmt.Sprintf("%sencoder.down.%d.block.%d.conv1.weight", p, level, i)); i++ {
			x = g.vaeRes(x, fmt.Sprintf("%sencoder.down.%d.block.%d.", p, level, i))
		}
		if level != cfg.Levels-1 {
			// LDM's Downsample pads right and bottom by one, then a
			// stride-2 3x3 conv without padding.
			x = g.convPad(g.c.PadEnd(x, 1, 1), fmt.Sprintf("%sencoder.down.%d.downsample.conv", p, level), 2, 0)
		}
	}
	x = g.vaeMid(x, p+"encoder.")
	x = g.conv2d(g.c.SiLU(g.groupNorm(x, p+"encoder.norm_out", vaeNormEps)), p+"encoder.conv_out", 1)
	if cfg.QuantConv {
		x = g.conv2d(x, p+"quant_conv", 1)
	}
	return x
}

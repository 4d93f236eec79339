package kl

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
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
	infer.RegisterVAEKind("kl", infer.VAEKind{Detect: detectKL, IsWeight: isKLWeight, EncoderParts: []string{"encoder.", "quant_conv."},
		Decode: func(g *infer.Builder, c *infer.VAEConfig, z native.Tensor) native.Tensor {
			return vaeDecode(g, c.Layout.(*KLConfig), z)
		},
		Encode: func(g *infer.Builder, c *infer.VAEConfig, x native.Tensor) native.Tensor {
			return vaeEncode(g, c.Layout.(*KLConfig), x)
		},
	})
}

// isKLWeight reports an AutoencoderKL tensor under first_stage_model.
func isKLWeight(name string) bool {
	for _, p := range []string{"encoder.", "decoder.", "quant_conv.", "post_quant_conv."} {
		if infer.HasPrefix(name, infer.VAEPfx+p) {
			return true
		}
	}
	return false
}

// detectKL reads an AutoencoderKL's configuration from its shapes.
func detectKL(s infer.Shapes, c *infer.VAEConfig) error {
	p := infer.VAEPfx
	kl := &KLConfig{}
	c.Layout = kl
	var err error
	if c.ZChannels, err = s.Dim(p+"decoder.conv_in.weight", 1); err != nil {
		return err
	}
	for s.Has(fmt.Sprintf("%sdecoder.up.%d.block.0.conv1.weight", p, kl.Levels)) {
		kl.Levels++
	}
	if kl.Levels == 0 {
		return fmt.Errorf("no decoder levels under %sdecoder.up", p)
	}
	for s.Has(fmt.Sprintf("%sdecoder.up.0.block.%d.conv1.weight", p, kl.BlocksPerLevel)) {
		kl.BlocksPerLevel++
	}
	c.HasEncoder = s.Has(p + "encoder.conv_in.weight")
	kl.QuantConv = s.Has(p + "post_quant_conv.weight")
	return nil
}

// vaeRes is the VAE's ResnetBlock.
func vaeRes(g *infer.Builder, x native.Tensor, p string) native.Tensor {
	h := g.Conv2d(g.Ctx.SiLU(g.GroupNorm(x, p+"norm1", vaeNormEps)), p+"conv1", 1)
	h = g.Conv2d(g.Ctx.SiLU(g.GroupNorm(h, p+"norm2", vaeNormEps)), p+"conv2", 1)
	if g.Has(p + "nin_shortcut.weight") {
		x = g.Conv2d(x, p+"nin_shortcut", 1)
	}
	return g.Ctx.Add(h, x)
}

// vaeAttn is the VAE's single-head AttnBlock over all positions.
func vaeAttn(g *infer.Builder, x native.Tensor, p string) native.Tensor {
	ne := x.Ne()
	h := g.GroupNorm(x, p+"norm", vaeNormEps)
	q := infer.ToTokens(g.Ctx, g.Conv2d(h, p+"q", 1))
	k := infer.ToTokens(g.Ctx, g.Conv2d(h, p+"k", 1))
	v := infer.ToTokens(g.Ctx, g.Conv2d(h, p+"v", 1))
	a := infer.FromTokens(g.Ctx, infer.Attention(g.Ctx, q, k, v, 1, false), ne[0], ne[1])
	return g.Ctx.Add(g.Conv2d(a, p+"proj_out", 1), x)
}

func vaeMid(g *infer.Builder, x native.Tensor, p string) native.Tensor {
	x = vaeRes(g, x, p+"mid.block_1.")
	x = vaeAttn(g, x, p+"mid.attn_1.")
	return vaeRes(g, x, p+"mid.block_2.")
}

// vaeDecode turns a VAE latent z [w, h, Z, N] (the diffusion latent
// already unscaled and unshifted) into an image [8w, 8h, 3, N], nominally in [-1, 1] (unclamped,
// as sd.cpp hands it to its PNG conversion; see ImageFromCHW).
func vaeDecode(g *infer.Builder, cfg *KLConfig, z native.Tensor) native.Tensor {
	p := infer.VAEPfx
	x := z
	if cfg.QuantConv {
		x = g.Conv2d(x, p+"post_quant_conv", 1)
	}
	x = g.Conv2d(x, p+"decoder.conv_in", 1)
	x = vaeMid(g, x, p+"decoder.")
	for level := cfg.Levels - 1; level >= 0; level-- {
		for i := 0; i < cfg.BlocksPerLevel; i++ {
			x = vaeRes(g, x, fmt.Sprintf("%sdecoder.up.%d.block.%d.", p, level, i))
		}
		if level != 0 {
			x = g.Conv2d(g.Ctx.UpscaleNearest(x, 2), fmt.Sprintf("%sdecoder.up.%d.upsample.conv", p, level), 1)
		}
	}
	return g.Conv2d(g.Ctx.SiLU(g.GroupNorm(x, p+"decoder.norm_out", vaeNormEps)), p+"decoder.conv_out", 1)
}

// vaeEncode turns an image [W, H, 3, N] in [-1, 1] into the moments of
// the latent distribution [W/8, H/8, 2Z, N]: Z channels of mean, then Z of
// log-variance (before the scale factor).
func vaeEncode(g *infer.Builder, cfg *KLConfig, img native.Tensor) native.Tensor {
	p := infer.VAEPfx
	x := g.Conv2d(img, p+"encoder.conv_in", 1)
	for level := 0; level < cfg.Levels; level++ {
		for i := 0; g.Has(fmt.Sprintf("%sencoder.down.%d.block.%d.conv1.weight", p, level, i)); i++ {
			x = vaeRes(g, x, fmt.Sprintf("%sencoder.down.%d.block.%d.", p, level, i))
		}
		if level != cfg.Levels-1 {
			// LDM's Downsample pads right and bottom by one, then a
			// stride-2 3x3 conv without padding.
			x = g.ConvPad(g.Ctx.PadEnd(x, 1, 1), fmt.Sprintf("%sencoder.down.%d.downsample.conv", p, level), 2, 0)
		}
	}
	x = vaeMid(g, x, p+"encoder.")
	x = g.Conv2d(g.Ctx.SiLU(g.GroupNorm(x, p+"encoder.norm_out", vaeNormEps)), p+"encoder.conv_out", 1)
	if cfg.QuantConv {
		x = g.Conv2d(x, p+"quant_conv", 1)
	}
	return x
}

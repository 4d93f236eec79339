package wan

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// The VAE kind "wan": Wan 2.1's causal 3-D VAE (16 latent channels; also
// Qwen-Image's, on one frame) and Wan 2.2's (48 channels, TI2V-5B). Its
// graph is graph_wanvae.go, its frame loops wanvae_frames.go. A family using it
// sets VAEFacts{Kind: "wan", Scale: 1}: the kind maps diffusion latents to
// VAE latents itself, per channel (latents_mean and latents_std), as
// sd.cpp's Wan VAE runner does.

// WanVAEConfig is a Wan VAE's layout (VAEConfig.Layout). Depths are the
// architecture's (sd.cpp fixes them too); widths come from the shapes.
type WanVAEConfig struct {
	// V22 selects Wan 2.2's blocks (residual shortcuts around each level,
	// patchified pixels); false is Wan 2.1's.
	V22 bool
	// EncDim and DecDim are the widths of the outermost level (2.1: 96
	// and 96; 2.2: 160 and 256); EncDim is 0 without an encoder.
	EncDim, DecDim int
	// ZDim is the latent width (16 or 48).
	ZDim int
	// Pixels is the pixel channels (3) and Patch the pixel patch size
	// folded into channels (1; 2.2: 2, so its decoder ends in 12 channels).
	Pixels, Patch int
}

// Architecture constants of both versions (sd.cpp's WanVAE defaults).
var (
	WanDimMult      = []int{1, 2, 4, 4}
	WanTempUp       = []bool{true, true, false}
	WanTempDown     = []bool{false, true, true}
	WanResBlocks    = 2
	wanEncodeStride = 4 // frames per encoder chunk after the first
)

// WanRMSEps is the RMS norm's epsilon.
const WanRMSEps = 1e-12

// wanCacheFrames is CACHE_T: the frames of history a causal conv keeps.
const wanCacheFrames int64 = 2

// Per-channel latent statistics: VAE latent = diffusion latent · std + mean
// (Wan's latents_mean and latents_std, as diffusers' configs and sd.cpp have them).
var (
	wan21Mean = []float32{-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
		0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921}
	wan21Std = []float32{2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
		3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160}
	wan22Mean = []float32{-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
		-0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
		-0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
		-0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
		-0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
		0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667}
	wan22Std = []float32{0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
		0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
		0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
		0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
		0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
		0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744}
)

// LatentStats returns the per-channel mean and std of z-channel latents.
func (c *WanVAEConfig) LatentStats() (mean, std []float32) {
	if c.ZDim == len(wan22Mean) {
		return wan22Mean, wan22Std
	}
	return wan21Mean, wan21Std
}

func init() {
	infer.RegisterVAEKind("wan", infer.VAEKind{Detect: DetectWanVAE, IsWeight: isWanVAEWeight, MeanOnly: true, EncoderParts: []string{"encoder.", "conv1."},
		Decode: func(g *infer.Builder, c *infer.VAEConfig, z native.Tensor) native.Tensor {
			return (&WanRun{G: g, Cfg: c.Layout.(*WanVAEConfig)}).decode(z)
		},
		Encode: func(g *infer.Builder, c *infer.VAEConfig, x native.Tensor) native.Tensor {
			return (&WanRun{G: g, Cfg: c.Layout.(*WanVAEConfig)}).Encode(x)
		},
		DecodeVideo: decodeWanVideo, EncodeVideo: encodeWanVideo,
		Factors: func(c *infer.VAEConfig) (int, int) { return c.Layout.(*WanVAEConfig).Factors() },
	})
}

// isWanVAEWeight reports a Wan VAE tensor under first_stage_model (the
// top-level conv1 and conv2 are the latent projections).
func isWanVAEWeight(name string) bool {
	for _, p := range []string{"encoder.", "decoder.", "conv1.", "conv2."} {
		if infer.HasPrefix(name, infer.VAEPfx+p) {
			return true
		}
	}
	return false
}

// DetectWanVAE reads a Wan VAE's configuration from its shapes: the
// biases and gammas give the widths (kernels may be 5-D, or folded to 4-D
// in a GGUF).
func DetectWanVAE(s infer.Shapes, c *infer.VAEConfig) error {
	p := infer.VAEPfx
	w := &WanVAEConfig{Pixels: 3, Patch: 1}
	c.Layout = w
	var err error
	if w.ZDim, err = s.Dim(p+"conv2.bias", 0); err != nil {
		return err
	}
	w.V22 = s.Has(p + "decoder.upsamples.0.upsamples.0.residual.0.gamma")
	if !w.V22 && !s.Has(p+"decoder.upsamples.0.residual.0.gamma") {
		return fmt.Errorf("no decoder blocks under %sdecoder.upsamples", p)
	}
	if w.DecDim, err = s.Dim(p+"decoder.head.0.gamma", 0); err != nil {
		return err
	}
	out, err := s.Dim(p+"decoder.head.2.bias", 0)
	if err != nil {
		return err
	}
	if w.V22 {
		w.Patch = 2
	}
	if out%(w.Patch*w.Patch) != 0 {
		return fmt.Errorf("%sdecoder.head.2.bias: %d output channels for %dx%d patches", p, out, w.Patch, w.Patch)
	}
	w.Pixels = out / (w.Patch * w.Patch)
	if ks, ok := s[p+"decoder.conv1.weight"]; ok && len(ks) == 4 && ks[1] == int64(w.ZDim) {
		return fmt.Errorf("%sdecoder.conv1.weight: a 2-D Wan VAE (%v), which this build does not run", p, ks)
	}
	c.ZChannels = w.ZDim
	c.HasEncoder = s.Has(p + "encoder.conv1.bias")
	if c.HasEncoder {
		if w.EncDim, err = s.Dim(p+"encoder.conv1.bias", 0); err != nil {
			return err
		}
	}
	return nil
}

// Factors returns the pixels per latent cell along each side (8; 2.2:
// 16) and the frames per latent frame after the first (4): what a
// family's VAEFacts.Down and TimeFactor must say (DetectConfig checks).
func (c *WanVAEConfig) Factors() (spatial, temporal int) { return 8 * c.Patch, 4 }

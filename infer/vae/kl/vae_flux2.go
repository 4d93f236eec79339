package kl

import (
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// The Flux.2 autoencoder (VAE kind "flux2"): an LDM AutoencoderKL with 32
// latent channels and quant_conv/post_quant_conv (the "kl" kind's graphs),
// whose latent the DiT sees as 2×2 patches (128 channels at 1/16 of the
// image) normalized per channel by fixed statistics, as sd.cpp's
// AutoEncoderKL does for Flux.2 (decode: z·std + mean, then unpatchify;
// encode: the moments' mean, patchify, then (z - mean)/std). The engine
// holds that latent as [32, H/8, W/8] values in the same memory order as
// sd.cpp's [128, H/16, W/16], so its noise lands where sd-cli's does.

// flux2LatentMean and flux2LatentStd are sd.cpp's per-channel statistics
// of the 128 patch channels (channel c·4 + 2·row + col of latent channel
// c), as stable-diffusion.cpp 97d2990 fixes them.
var (
	Flux2LatentMean = []float32{
		-0.0676, -0.0715, -0.0753, -0.0745, 0.0223, 0.0180, 0.0142, 0.0184,
		-0.0001, -0.0063, -0.0002, -0.0031, -0.0272, -0.0281, -0.0276, -0.0290,
		-0.0769, -0.0672, -0.0902, -0.0892, 0.0168, 0.0152, 0.0079, 0.0086,
		0.0083, 0.0015, 0.0003, -0.0043, -0.0439, -0.0419, -0.0438, -0.0431,
		-0.0102, -0.0132, -0.0066, -0.0048, -0.0311, -0.0306, -0.0279, -0.0180,
		0.0030, 0.0015, 0.0126, 0.0145, 0.0347, 0.0338, 0.0337, 0.0283,
		0.0020, 0.0047, 0.0047, 0.0050, 0.0123, 0.0081, 0.0081, 0.0146,
		0.0681, 0.0679, 0.0767, 0.0732, -0.0462, -0.0474, -0.0392, -0.0511,
		-0.0528, -0.0477, -0.0470, -0.0517, -0.0317, -0.0316, -0.0345, -0.0283,
		0.0510, 0.0445, 0.0578, 0.0458, -0.0412, -0.0458, -0.0487, -0.0467,
		-0.0088, -0.0106, -0.0088, -0.0046, -0.0376, -0.0432, -0.0436, -0.0499,
		0.0118, 0.0166, 0.0203, 0.0279, 0.0113, 0.0129, 0.0016, 0.0072,
		-0.0118, -0.0018, -0.0141, -0.0054, -0.0091, -0.0138, -0.0145, -0.0187,
		0.0323, 0.0305, 0.0259, 0.0300, 0.0540, 0.0614, 0.0495, 0.0590,
		-0.0511, -0.0603, -0.0478, -0.0524, -0.0227, -0.0274, -0.0154, -0.0255,
		-0.0572, -0.0565, -0.0518, -0.0496, 0.0116, 0.0054, 0.0163, 0.0104,
	}
	Flux2LatentStd = []float32{
		1.8029, 1.7786, 1.7868, 1.7837, 1.7717, 1.7590, 1.7610, 1.7479,
		1.7336, 1.7373, 1.7340, 1.7343, 1.8626, 1.8527, 1.8629, 1.8589,
		1.7593, 1.7526, 1.7556, 1.7583, 1.7363, 1.7400, 1.7355, 1.7394,
		1.7342, 1.7246, 1.7392, 1.7304, 1.7551, 1.7513, 1.7559, 1.7488,
		1.8449, 1.8454, 1.8550, 1.8535, 1.8240, 1.7813, 1.7854, 1.7945,
		1.8047, 1.7876, 1.7695, 1.7676, 1.7782, 1.7667, 1.7925, 1.7848,
		1.7579, 1.7407, 1.7483, 1.7368, 1.7961, 1.7998, 1.7920, 1.7925,
		1.7780, 1.7747, 1.7727, 1.7749, 1.7526, 1.7447, 1.7657, 1.7495,
		1.7775, 1.7720, 1.7813, 1.7813, 1.8162, 1.8013, 1.8023, 1.8033,
		1.7527, 1.7331, 1.7563, 1.7482, 1.7610, 1.7507, 1.7681, 1.7613,
		1.7665, 1.7545, 1.7828, 1.7726, 1.7896, 1.7999, 1.7864, 1.7760,
		1.7613, 1.7625, 1.7560, 1.7577, 1.7783, 1.7671, 1.7810, 1.7799,
		1.7201, 1.7068, 1.7265, 1.7091, 1.7793, 1.7578, 1.7502, 1.7455,
		1.7587, 1.7500, 1.7525, 1.7362, 1.7616, 1.7572, 1.7444, 1.7430,
		1.7509, 1.7610, 1.7634, 1.7612, 1.7254, 1.7135, 1.7321, 1.7226,
		1.7664, 1.7624, 1.7718, 1.7664, 1.7457, 1.7441, 1.7569, 1.7530,
	}
)

func init() {
	infer.RegisterVAEKind("flux2", infer.VAEKind{Detect: detectKL, IsWeight: isKLWeight,
		Decode: func(g *infer.Builder, c *infer.VAEConfig, z native.Tensor) native.Tensor {
			return vaeDecode(g, c.Layout.(*KLConfig), Flux2Unpack(g, z))
		},
		Encode: func(g *infer.Builder, c *infer.VAEConfig, x native.Tensor) native.Tensor {
			return Flux2Pack(g, vaeEncode(g, c.Layout.(*KLConfig), x))
		},
	})
}

// Flux2Unpack turns the diffusion latent z [w, h, 32, 1] (read as sd.cpp's
// [w/2, h/2, 128]) into the decoder's input [w, h, 32, 1]: each patch
// channel scaled by its std and shifted by its mean, then unpatchified.
func Flux2Unpack(g *infer.Builder, z native.Tensor) native.Tensor {
	ne := z.Ne()
	w, h, c := ne[0]/2, ne[1]/2, ne[2]
	z = g.Ctx.Reshape(z, w, h, 4*c, 1)
	z = g.Ctx.Add(g.Ctx.Mul(z, g.Constant(Flux2LatentStd, 1, 1, 4*c, 1)), g.Constant(Flux2LatentMean, 1, 1, 4*c, 1))
	// [col, row, c] patch channels: [j, i, pc, pr + 2c] -> [pc, j, i, pr + 2c].
	z = g.Ctx.Cont(g.Ctx.Permute(g.Ctx.Reshape(z, w, h, 2, 2*c), 1, 2, 0, 3))
	// [X, i, pr, c] -> [X, pr, i, c], X = 2j + pc, then Y = 2i + pr.
	z = g.Ctx.Cont(g.Ctx.Permute(g.Ctx.Reshape(z, 2*w, h, 2, c), 0, 2, 1, 3))
	return g.Ctx.Reshape(z, 2*w, 2*h, c, 1)
}

// Flux2Pack turns the encoder's moments [w, h, 2·32, 1] into what the
// core reads as moments of the diffusion latent: the mean patchified into
// [w/2, h/2, 128] and normalized, then a log-variance of -100 (sd.cpp
// takes the mean itself; the core's sample adds noise of std e^-15 at most).
func Flux2Pack(g *infer.Builder, m native.Tensor) native.Tensor {
	ne, nb := m.Ne(), m.Nb()
	x, y, c := ne[0], ne[1], ne[2]/2
	z := g.Ctx.View(m, [4]int64{x, y, c, 1}, nb[1], nb[2], nb[3], 0)
	w, h := x/2, y/2
	// [X, pr, i, c] -> [X, i, pr, c].
	z = g.Ctx.Cont(g.Ctx.Permute(g.Ctx.Reshape(g.Ctx.Cont(z), x, 2, h, c), 0, 2, 1, 3))
	// [pc, j, i, pr + 2c] -> [j, i, pc, pr + 2c].
	z = g.Ctx.Cont(g.Ctx.Permute(g.Ctx.Reshape(z, 2, w, h, 2*c), 2, 0, 1, 3))
	z = g.Ctx.Reshape(z, w, h, 4*c, 1)
	inv := make([]float32, len(Flux2LatentStd))
	for i, s := range Flux2LatentStd {
		inv[i] = 1 / s
	}
	z = g.Ctx.Mul(g.Ctx.Sub(z, g.Constant(Flux2LatentMean, 1, 1, 4*c, 1)), g.Constant(inv, 1, 1, 4*c, 1))
	return g.Ctx.Concat(z, g.Ctx.ScaleBias(z, 0, -100), 2)
}

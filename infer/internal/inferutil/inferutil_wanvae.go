//go:build cgo

package inferutil

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	wanvae "github.com/sdtool/sdtool/infer/vae/wan"
)

// WanVAETestWeights makes a Wan VAE's tensors (PyTorch shapes, Conv3d
// kernels 5-D) with decoder width dec and encoder width enc (0: none).
func WanVAETestWeights(r *rand.Rand, cfg *wanvae.WanVAEConfig, dec, enc int) map[string]TestWeight {
	w := map[string]TestWeight{}
	z := int64(cfg.ZDim)
	add := func(name string, shape ...int64) {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		std, typ := 0.1, formats.F32
		gamma := strings.HasSuffix(name, ".gamma")
		if !gamma && len(shape) >= 4 {
			std, typ = 1/math.Sqrt(float64(n/shape[0])), formats.F16
		}
		data := Randn(r, int(n), std)
		if gamma { // scales scatter around 1
			for i := range data {
				data[i] += 1
			}
		}
		w[name] = TestWeight{Shape: shape, Typ: typ, Data: data}
	}
	conv3 := func(p string, out, in, kt, k int64) {
		add(p+".weight", out, in, kt, k, k)
		add(p+".bias", out)
	}
	conv2 := func(p string, out, in, k int64) {
		add(p+".weight", out, in, k, k)
		add(p+".bias", out)
	}
	res := func(p string, in, out int64) {
		add(p+"residual.0.gamma", in, 1, 1, 1)
		conv3(p+"residual.2", out, in, 3, 3)
		add(p+"residual.3.gamma", out, 1, 1, 1)
		conv3(p+"residual.6", out, out, 3, 3)
		if in != out {
			conv3(p+"shortcut", out, in, 1, 1)
		}
	}
	mid := func(p string, c int64) {
		res(p+"middle.0.", c, c)
		add(p+"middle.1.norm.gamma", c, 1, 1)
		conv2(p+"middle.1.to_qkv", 3*c, c, 1)
		conv2(p+"middle.1.proj", c, c, 1)
		res(p+"middle.2.", c, c)
	}
	pix := int64(cfg.Pixels * cfg.Patch * cfg.Patch)
	d := int64(dec)
	dims := []int64{4 * d, 4 * d, 4 * d, 2 * d, d}
	p := infer.VAEPfx + "decoder."
	conv3(infer.VAEPfx+"conv2", z, z, 1, 1)
	conv3(p+"conv1", dims[0], z, 3, 3)
	mid(p, dims[0])
	idx := 0
	for i := range 4 {
		in, out := dims[i], dims[i+1]
		if cfg.V22 {
			q := fmt.Sprintf("%supsamples.%d.", p, i)
			for j := range 3 {
				res(fmt.Sprintf("%supsamples.%d.", q, j), in, out)
				in = out
			}
			if i < 3 {
				conv2(q+"upsamples.3.resample.1", out, out, 3)
				if wanvae.WanTempUp[i] {
					conv3(q+"upsamples.3.time_conv", 2*out, out, 3, 1)
				}
			}
			continue
		}
		if i > 0 {
			in /= 2
		}
		for range 3 {
			res(fmt.Sprintf("%supsamples.%d.", p, idx), in, out)
			in = out
			idx++
		}
		if i < 3 {
			q := fmt.Sprintf("%supsamples.%d.", p, idx)
			conv2(q+"resample.1", out/2, out, 3)
			if wanvae.WanTempUp[i] {
				conv3(q+"time_conv", 2*out, out, 3, 1)
			}
			idx++
		}
	}
	add(p+"head.0.gamma", dims[4], 1, 1, 1)
	conv3(p+"head.2", pix, dims[4], 3, 3)
	if enc == 0 {
		return w
	}
	e := int64(enc)
	edims := []int64{e, e, 2 * e, 4 * e, 4 * e}
	p = infer.VAEPfx + "encoder."
	conv3(p+"conv1", e, pix, 3, 3)
	idx = 0
	for i := range 4 {
		in, out := edims[i], edims[i+1]
		q := p
		if cfg.V22 {
			q = fmt.Sprintf("%sdownsamples.%d.", p, i)
			idx = 0
		}
		for range 2 {
			res(fmt.Sprintf("%sdownsamples.%d.", q, idx), in, out)
			in = out
			idx++
		}
		if i < 3 {
			rq := fmt.Sprintf("%sdownsamples.%d.", q, idx)
			conv2(rq+"resample.1", out, out, 3)
			if wanvae.WanTempDown[i] {
				conv3(rq+"time_conv", out, out, 3, 1)
			}
			idx++
		}
	}
	mid(p, edims[4])
	add(p+"head.0.gamma", edims[4], 1, 1, 1)
	conv3(p+"head.2", 2*z, edims[4], 3, 3)
	conv3(infer.VAEPfx+"conv1", 2*z, 2*z, 1, 1)
	return w
}

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
	w := wanVAEWeights{r: r, w: map[string]TestWeight{}}
	z := int64(cfg.ZDim)
	pix := int64(cfg.Pixels * cfg.Patch * cfg.Patch)
	w.conv3(infer.VAEPfx+"conv2", z, z, 1, 1)
	w.decoder(cfg, z, pix, int64(dec))
	if enc == 0 {
		return w.w
	}
	w.encoder(cfg, z, pix, int64(enc))
	w.conv3(infer.VAEPfx+"conv1", 2*z, 2*z, 1, 1)
	return w.w
}

// wanVAEWeights draws a Wan VAE's tensors from r, in the order the
// layout lists them.
type wanVAEWeights struct {
	r *rand.Rand
	w map[string]TestWeight
}

// add draws a tensor: kernels scaled to their fan-in in f16, scales
// (gamma) around 1 and the rest small, in f32.
func (w wanVAEWeights) add(name string, shape ...int64) {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	std, typ := 0.1, formats.F32
	gamma := strings.HasSuffix(name, ".gamma")
	if !gamma && len(shape) >= 4 {
		std, typ = 1/math.Sqrt(float64(n/shape[0])), formats.F16
	}
	data := Randn(w.r, int(n), std)
	if gamma { // scales scatter around 1
		for i := range data {
			data[i] += 1
		}
	}
	w.w[name] = TestWeight{Shape: shape, Typ: typ, Data: data}
}

func (w wanVAEWeights) conv3(p string, out, in, kt, k int64) {
	w.add(p+".weight", out, in, kt, k, k)
	w.add(p+".bias", out)
}

func (w wanVAEWeights) conv2(p string, out, in, k int64) {
	w.add(p+".weight", out, in, k, k)
	w.add(p+".bias", out)
}

func (w wanVAEWeights) res(p string, in, out int64) {
	w.add(p+"residual.0.gamma", in, 1, 1, 1)
	w.conv3(p+"residual.2", out, in, 3, 3)
	w.add(p+"residual.3.gamma", out, 1, 1, 1)
	w.conv3(p+"residual.6", out, out, 3, 3)
	if in != out {
		w.conv3(p+"shortcut", out, in, 1, 1)
	}
}

func (w wanVAEWeights) mid(p string, c int64) {
	w.res(p+"middle.0.", c, c)
	w.add(p+"middle.1.norm.gamma", c, 1, 1)
	w.conv2(p+"middle.1.to_qkv", 3*c, c, 1)
	w.conv2(p+"middle.1.proj", c, c, 1)
	w.res(p+"middle.2.", c, c)
}

// decoder draws the decoder of width d (Wan 2.2's upsamples nested per level).
func (w wanVAEWeights) decoder(cfg *wanvae.WanVAEConfig, z, pix, d int64) {
	dims := []int64{4 * d, 4 * d, 4 * d, 2 * d, d}
	p := infer.VAEPfx + "decoder."
	w.conv3(p+"conv1", dims[0], z, 3, 3)
	w.mid(p, dims[0])
	idx := 0
	for i := range 4 {
		in, out := dims[i], dims[i+1]
		if cfg.V22 {
			q := fmt.Sprintf("%supsamples.%d.", p, i)
			for j := range 3 {
				w.res(fmt.Sprintf("%supsamples.%d.", q, j), in, out)
				in = out
			}
			if i < 3 {
				w.conv2(q+"upsamples.3.resample.1", out, out, 3)
				if wanvae.WanTempUp[i] {
					w.conv3(q+"upsamples.3.time_conv", 2*out, out, 3, 1)
				}
			}
			continue
		}
		if i > 0 {
			in /= 2
		}
		for range 3 {
			w.res(fmt.Sprintf("%supsamples.%d.", p, idx), in, out)
			in = out
			idx++
		}
		if i < 3 {
			q := fmt.Sprintf("%supsamples.%d.", p, idx)
			w.conv2(q+"resample.1", out/2, out, 3)
			if wanvae.WanTempUp[i] {
				w.conv3(q+"time_conv", 2*out, out, 3, 1)
			}
			idx++
		}
	}
	w.add(p+"head.0.gamma", dims[4], 1, 1, 1)
	w.conv3(p+"head.2", pix, dims[4], 3, 3)
}

// encoder draws the encoder of width e (Wan 2.2's downsamples nested per level).
func (w wanVAEWeights) encoder(cfg *wanvae.WanVAEConfig, z, pix, e int64) {
	edims := []int64{e, e, 2 * e, 4 * e, 4 * e}
	p := infer.VAEPfx + "encoder."
	w.conv3(p+"conv1", e, pix, 3, 3)
	idx := 0
	for i := range 4 {
		in, out := edims[i], edims[i+1]
		q := p
		if cfg.V22 {
			q = fmt.Sprintf("%sdownsamples.%d.", p, i)
			idx = 0
		}
		for range 2 {
			w.res(fmt.Sprintf("%sdownsamples.%d.", q, idx), in, out)
			in = out
			idx++
		}
		if i < 3 {
			rq := fmt.Sprintf("%sdownsamples.%d.", q, idx)
			w.conv2(rq+"resample.1", out, out, 3)
			if wanvae.WanTempDown[i] {
				w.conv3(rq+"time_conv", out, out, 3, 1)
			}
			idx++
		}
	}
	w.mid(p, edims[4])
	w.add(p+"head.0.gamma", edims[4], 1, 1, 1)
	w.conv3(p+"head.2", 2*z, edims[4], 3, 3)
}

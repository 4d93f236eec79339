//go:build cgo

package wan_test

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	wanvae "github.com/sdtool/sdtool/infer/vae/wan"
	"github.com/sdtool/sdtool/quant"
)

// A plain-Go Wan VAE in float64 over whole videos, the reference for the
// chunked ggml graphs: causal convolutions see zero frames before the
// video instead of caches, the time upsampling runs over frames 1.. (frame
// 0 passes), and Wan 2.2's duplicated shortcut drops its first frames, as
// the original model defines them.

// refVid is a video [T][C][H][W] (ggml's [W, H, C, T] read innermost first).
type refVid struct {
	t, c, h, w int
	d          []float64
}

func newRefVid(t, c, h, w int) refVid {
	return refVid{t, c, h, w, make([]float64, t*c*h*w)}
}

func (v refVid) at(t, c, y, x int) *float64 { return &v.d[((t*v.c+c)*v.h+y)*v.w+x] }

func refVidOf(f []float32, t, c, h, w int) refVid {
	v := newRefVid(t, c, h, w)
	for i, x := range f {
		v.d[i] = float64(x)
	}
	return v
}

// refWeights are a test model's weights as the reference reads them.
type refWeights map[string][]float64

// refConv3d convolves x with the kernel name [out, in, kt, kh, kw] after
// tPad zero frames, time stride ts, spatial stride ss and padding sp.
func refConv3d(ws refWeights, shapes map[string][]int64, x refVid, name string, tPad, ts, ss, sp int) refVid {
	k, sh := ws[name+".weight"], shapes[name+".weight"]
	kt, kh, kw := 1, int(sh[2]), int(sh[3])
	if len(sh) == 5 {
		kt, kh, kw = int(sh[2]), int(sh[3]), int(sh[4])
	}
	oc, ic := int(sh[0]), int(sh[1])
	b := ws[name+".bias"]
	ot := (x.t+tPad-kt)/ts + 1
	oh, ow := (x.h+2*sp-kh)/ss+1, (x.w+2*sp-kw)/ss+1
	out := newRefVid(ot, oc, oh, ow)
	for t := range ot {
		for o := range oc {
			for y := range oh {
				for xx := range ow {
					s := b[o]
					for c := range ic {
						for a := range kt {
							ft := t*ts + a - tPad
							if ft < 0 {
								continue
							}
							for i := range kh {
								for j := range kw {
									iy, ix := y*ss-sp+i, xx*ss-sp+j
									if iy < 0 || iy >= x.h || ix < 0 || ix >= x.w {
										continue
									}
									s += *x.at(ft, c, iy, ix) * k[(((o*ic+c)*kt+a)*kh+i)*kw+j]
								}
							}
						}
					}
					*out.at(t, o, y, xx) = s
				}
			}
		}
	}
	return out
}

func refRMS(ws refWeights, x refVid, name string) refVid {
	g := ws[name+".gamma"]
	out := newRefVid(x.t, x.c, x.h, x.w)
	for t := range x.t {
		for y := range x.h {
			for xx := range x.w {
				var s float64
				for c := range x.c {
					s += *x.at(t, c, y, xx) * *x.at(t, c, y, xx)
				}
				r := 1 / math.Sqrt(s/float64(x.c)+wanvae.WanRMSEps)
				for c := range x.c {
					*out.at(t, c, y, xx) = *x.at(t, c, y, xx) * r * g[c]
				}
			}
		}
	}
	return out
}

func refSiLU(x refVid) refVid {
	out := newRefVid(x.t, x.c, x.h, x.w)
	for i, v := range x.d {
		out.d[i] = v / (1 + math.Exp(-v))
	}
	return out
}

func refAdd(a, b refVid) refVid {
	out := newRefVid(a.t, a.c, a.h, a.w)
	for i := range a.d {
		out.d[i] = a.d[i] + b.d[i]
	}
	return out
}

func refResBlock(ws refWeights, sh map[string][]int64, x refVid, p string) refVid {
	h := x
	if _, ok := ws[p+"shortcut.weight"]; ok {
		h = refConv3d(ws, sh, x, p+"shortcut", 0, 1, 1, 0)
	}
	y := refConv3d(ws, sh, refSiLU(refRMS(ws, x, p+"residual.0")), p+"residual.2", 2, 1, 1, 1)
	y = refConv3d(ws, sh, refSiLU(refRMS(ws, y, p+"residual.3")), p+"residual.6", 2, 1, 1, 1)
	return refAdd(y, h)
}

// refAttn is single-head attention over each frame's positions.
func refAttn(ws refWeights, sh map[string][]int64, x refVid, p string) refVid {
	qkv := refConv3d(ws, sh, refRMS(ws, x, p+"norm"), p+"to_qkv", 0, 1, 1, 0)
	c, l := x.c, x.h*x.w
	a := newRefVid(x.t, c, x.h, x.w)
	for t := range x.t {
		get := func(part, ch, pos int) float64 { return *qkv.at(t, part*c+ch, pos/x.w, pos%x.w) }
		for i := range l {
			sc := make([]float64, l)
			m := math.Inf(-1)
			for j := range l {
				var s float64
				for ch := range c {
					s += get(0, ch, i) * get(1, ch, j)
				}
				sc[j] = s / math.Sqrt(float64(c))
				m = math.Max(m, sc[j])
			}
			var z float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - m)
				z += sc[j]
			}
			for ch := range c {
				var s float64
				for j := range l {
					s += sc[j] / z * get(2, ch, j)
				}
				*a.at(t, ch, i/x.w, i%x.w) = s
			}
		}
	}
	return refAdd(refConv3d(ws, sh, a, p+"proj", 0, 1, 1, 0), x)
}

// refFrames returns frames [from, to) of x.
func refFrames(x refVid, from, to int) refVid {
	n := x.c * x.h * x.w
	return refVid{to - from, x.c, x.h, x.w, x.d[from*n : to*n]}
}

func refCat(a, b refVid) refVid {
	if a.t == 0 {
		return b
	}
	return refVid{a.t + b.t, a.c, a.h, a.w, append(append([]float64{}, a.d...), b.d...)}
}

func refUpNearest(x refVid) refVid {
	out := newRefVid(x.t, x.c, 2*x.h, 2*x.w)
	for t := range x.t {
		for c := range x.c {
			for y := range out.h {
				for xx := range out.w {
					*out.at(t, c, y, xx) = *x.at(t, c, y/2, xx/2)
				}
			}
		}
	}
	return out
}

// refResample is the whole-video Resample: frame 0 skips the time
// upsampling, the others go through a causal conv whose channel halves are
// two frames; downsampling's time conv runs on frames 1.. after frame 0.
func refResample(ws refWeights, sh map[string][]int64, x refVid, p string, mode wanvae.ResampleMode) refVid {
	if mode == wanvae.Up3d && x.t > 1 {
		y := refConv3d(ws, sh, refFrames(x, 1, x.t), p+"time_conv", 2, 1, 1, 0)
		// channels [k·C, (k+1)·C) of frame t are frame 2t+k
		x = refCat(refFrames(x, 0, 1), refVid{2 * y.t, y.c / 2, y.h, y.w, y.d})
	}
	if mode == wanvae.Up2d || mode == wanvae.Up3d {
		return refConv3d(ws, sh, refUpNearest(x), p+"resample.1", 0, 1, 1, 1)
	}
	// ZeroPad2d((0, 1, 0, 1)): a zero column and row after the last, then a
	// stride-2 conv without padding.
	padded := newRefVid(x.t, x.c, x.h+1, x.w+1)
	for t := range x.t {
		for c := range x.c {
			for y := range x.h {
				for xx := range x.w {
					*padded.at(t, c, y, xx) = *x.at(t, c, y, xx)
				}
			}
		}
	}
	x = refConv3d(ws, sh, padded, p+"resample.1", 0, 1, 2, 0)
	if mode == wanvae.Down3d && x.t > 1 {
		x = refCat(refFrames(x, 0, 1), refConv3d(ws, sh, x, p+"time_conv", 0, 2, 1, 0))
	}
	return x
}

// refDupUp is DupUp3D over the whole video: the first ft-1 frames dropped.
func refDupUp(x refVid, out, ft int) refVid {
	rep := out * ft * 4 / x.c
	y := newRefVid(x.t*ft, out, 2*x.h, 2*x.w)
	for t := range y.t {
		for o := range out {
			for yy := range y.h {
				for xx := range y.w {
					j := ((o*ft+t%ft)*2+yy%2)*2 + xx%2
					*y.at(t, o, yy, xx) = *x.at(t/ft, j/rep, yy/2, xx/2)
				}
			}
		}
	}
	return refFrames(y, ft-1, y.t)
}

// refAvgDown is AvgDown3D: zero frames in front, then group means.
func refAvgDown(x refVid, out, ft, fs int) refVid {
	if pad := (ft - x.t%ft) % ft; pad > 0 {
		x = refCat(newRefVid(pad, x.c, x.h, x.w), x)
	}
	group := x.c * ft * fs * fs / out
	y := newRefVid(x.t/ft, out, x.h/fs, x.w/fs)
	for t := range y.t {
		for o := range out {
			for yy := range y.h {
				for xx := range y.w {
					var s float64
					for g := range group {
						j := o*group + g
						d, b, a, c := j%fs, j/fs%fs, j/(fs*fs)%ft, j/(fs*fs*ft)
						s += *x.at(t*ft+a, c, yy*fs+b, xx*fs+d)
					}
					*y.at(t, o, yy, xx) = s / float64(group)
				}
			}
		}
	}
	return y
}

// refWanDecode decodes diffusion latents z (whole video) to pixels.
func refWanDecode(ws refWeights, sh map[string][]int64, cfg *wanvae.WanVAEConfig, z refVid) refVid {
	mean, std := cfg.LatentStats()
	for t := range z.t {
		for c := range z.c {
			for i := range z.h * z.w {
				v := z.at(t, c, i/z.w, i%z.w)
				*v = *v*float64(std[c]) + float64(mean[c])
			}
		}
	}
	p := infer.VAEPfx + "decoder."
	x := refConv3d(ws, sh, z, infer.VAEPfx+"conv2", 0, 1, 1, 0)
	x = refConv3d(ws, sh, x, p+"conv1", 2, 1, 1, 1)
	x = refResBlock(ws, sh, x, p+"middle.0.")
	x = refAttn(ws, sh, x, p+"middle.1.")
	x = refResBlock(ws, sh, x, p+"middle.2.")
	idx := 0
	for i := range wanvae.WanDimMult {
		last := i == len(wanvae.WanDimMult)-1
		mode := wanvae.Up2d
		if !last && wanvae.WanTempUp[i] {
			mode = wanvae.Up3d
		}
		if cfg.V22 {
			in := x
			q := fmt.Sprintf("%supsamples.%d.", p, i)
			for j := range wanvae.WanResBlocks + 1 {
				x = refResBlock(ws, sh, x, fmt.Sprintf("%supsamples.%d.", q, j))
			}
			if !last {
				x = refResample(ws, sh, x, fmt.Sprintf("%supsamples.%d.", q, wanvae.WanResBlocks+1), mode)
				ft := 1
				if mode == wanvae.Up3d {
					ft = 2
				}
				x = refAdd(x, refDupUp(in, x.c, ft))
			}
			continue
		}
		for range wanvae.WanResBlocks + 1 {
			x = refResBlock(ws, sh, x, fmt.Sprintf("%supsamples.%d.", p, idx))
			idx++
		}
		if !last {
			x = refResample(ws, sh, x, fmt.Sprintf("%supsamples.%d.", p, idx), mode)
			idx++
		}
	}
	x = refConv3d(ws, sh, refSiLU(refRMS(ws, x, p+"head.0")), p+"head.2", 2, 1, 1, 1)
	if cfg.Patch == 1 {
		return x
	}
	out := newRefVid(x.t, x.c/4, 2*x.h, 2*x.w)
	for t := range out.t {
		for c := range out.c {
			for y := range out.h {
				for xx := range out.w {
					*out.at(t, c, y, xx) = *x.at(t, c*4+(xx%2)*2+y%2, y/2, xx/2)
				}
			}
		}
	}
	return out
}

// refWanEncode encodes one frame of pixels [1, C, H, W] to the diffusion latent.
func refWanEncode(ws refWeights, sh map[string][]int64, cfg *wanvae.WanVAEConfig, x refVid) refVid {
	if cfg.Patch == 2 {
		y := newRefVid(x.t, x.c*4, x.h/2, x.w/2)
		for t := range y.t {
			for c := range y.c {
				for yy := range y.h {
					for xx := range y.w {
						ch, r, q := c/4, c/2%2, c%2
						*y.at(t, c, yy, xx) = *x.at(t, ch, yy*2+q, xx*2+r)
					}
				}
			}
		}
		x = y
	}
	p := infer.VAEPfx + "encoder."
	x = refConv3d(ws, sh, x, p+"conv1", 2, 1, 1, 1)
	idx := 0
	for i := range wanvae.WanDimMult {
		last := i == len(wanvae.WanDimMult)-1
		mode := wanvae.Down2d
		if !last && wanvae.WanTempDown[i] {
			mode = wanvae.Down3d
		}
		if cfg.V22 {
			in := x
			q := fmt.Sprintf("%sdownsamples.%d.", p, i)
			for j := range wanvae.WanResBlocks {
				x = refResBlock(ws, sh, x, fmt.Sprintf("%sdownsamples.%d.", q, j))
			}
			ft, fs := 1, 1
			if !last {
				x = refResample(ws, sh, x, fmt.Sprintf("%sdownsamples.%d.", q, wanvae.WanResBlocks), mode)
				fs = 2
				if mode == wanvae.Down3d {
					ft = 2
				}
			}
			x = refAdd(x, refAvgDown(in, x.c, ft, fs))
			continue
		}
		for range wanvae.WanResBlocks {
			x = refResBlock(ws, sh, x, fmt.Sprintf("%sdownsamples.%d.", p, idx))
			idx++
		}
		if !last {
			x = refResample(ws, sh, x, fmt.Sprintf("%sdownsamples.%d.", p, idx), mode)
			idx++
		}
	}
	x = refResBlock(ws, sh, x, p+"middle.0.")
	x = refAttn(ws, sh, x, p+"middle.1.")
	x = refResBlock(ws, sh, x, p+"middle.2.")
	x = refConv3d(ws, sh, refSiLU(refRMS(ws, x, p+"head.0")), p+"head.2", 2, 1, 1, 1)
	x = refConv3d(ws, sh, x, infer.VAEPfx+"conv1", 0, 1, 1, 0)
	mean, std := cfg.LatentStats()
	z := newRefVid(x.t, x.c/2, x.h, x.w)
	for t := range z.t {
		for c := range z.c {
			for i := range z.h * z.w {
				*z.at(t, c, i/z.w, i%z.w) = (*x.at(t, c, i/z.w, i%z.w) - float64(mean[c])) / float64(std[c])
			}
		}
	}
	return z
}

// refOf returns the reference's view of the weights (the values they hold
// after encoding) and their shapes.
func refOf(tb interface {
	Helper()
	Fatal(...any)
	Fatalf(string, ...any)
}, w map[string]inferutil.TestWeight) (refWeights, map[string][]int64) {
	ws, sh := refWeights{}, map[string][]int64{}
	for name, tw := range w {
		var v []float32
		if tw.Typ == formats.F16 {
			v = make([]float32, len(tw.Data))
			for i, x := range tw.Data {
				v[i] = quant.F16ToF32(quant.F32ToF16(x))
			}
		} else {
			v = tw.Data
		}
		d := make([]float64, len(v))
		for i, x := range v {
			d[i] = float64(x)
		}
		ws[name], sh[name] = d, tw.Shape
	}
	return ws, sh
}

package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// flux2Net is the Flux.2 DiT as a network (Family.Network "flux2"). The
// engine's latent [32, h, w] holds, in the same memory order, sd.cpp's
// [128, h/2, w/2] (the 2×2 patches of the VAE latent, normalized: VAE kind
// "flux2"), so each of its h/2·w/2 cells is one image token of 128 values
// and the sampler's noise is sd-cli's, value for value.
type flux2Net struct {
	cfg *Flux2Config
}

func init() {
	networks["flux2"] = func(m *Model) (network, error) {
		cfg, ok := m.Config.Network.(*Flux2Config)
		if !ok {
			return nil, fmt.Errorf("%s: no Flux.2 configuration", m.Path)
		}
		return &flux2Net{cfg: cfg}, nil
	}
}

func (f *flux2Net) channels() int { return f.cfg.LatentChannels() }

func (f *flux2Net) multiple() int { return f.cfg.Patch }

func (f *flux2Net) build(g *builder, in *netInput) (native.Tensor, []input, []blockTensor) {
	cfg := f.cfg
	c := in.cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("flux2: text tokens %d wide, txt_in takes %d", c.Dim, cfg.ContextDim)})
	}
	p := cfg.Patch
	rows, cols := in.h/p, in.w/p
	li := int64(rows * cols)
	img := newInput(g, formats.F32, int64(cfg.InChannels), li)
	txt := newInput(g, formats.F32, int64(c.Dim), int64(c.Tokens))
	t := newInput(g, formats.F32, 1)
	half := int64(cfg.HeadDim / 2)
	l := int64(c.Tokens) + li
	cos := newInput(g, formats.F32, half, l)
	sin := newInput(g, formats.F32, half, l)
	cv, sv := flux2RoPE(cfg.Axes, cfg.Theta, c.Tokens, rows, cols)
	ins := []input{
		{t: img, f32: patchify(in.x, cfg.InChannels, rows, cols, 1)}, {t: txt, f32: c.Context},
		{t: t, f32: []float32{in.t}}, {t: cos, f32: cv}, {t: sin, f32: sv},
	}
	var guid native.Tensor
	if cfg.Guidance {
		guid = newInput(g, formats.F32, 1)
		ins = append(ins, input{t: guid, f32: []float32{in.guidance}})
	}
	out, blocks := g.flux2(cfg, img, txt, t, guid, cos, sin, in.capture)
	return out, ins, blocks
}

// mapOutput turns the graph's tokens back into the latent's layout.
func (f *flux2Net) mapOutput(out []float32, in *netInput) []float32 {
	p := f.cfg.Patch
	return unpatchify(out, f.cfg.InChannels, in.h/p, in.w/p, 1)
}

package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// fluxNet is the Flux.1 MMDiT as a network (Family.Network "flux"): the
// latent [C, h, w] is cut into 2×2 patches in Go (feature c·4 + 2·row +
// col, patches row-major, as sd.cpp's patchify), the graph returns patch
// tokens, and mapOutput puts them back into the latent's layout.
type fluxNet struct {
	cfg *FluxConfig
}

func init() {
	networks["flux"] = func(m *Model) (network, error) {
		cfg, ok := m.Config.Network.(*FluxConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Flux configuration", m.Path)
		}
		return &fluxNet{cfg: cfg}, nil
	}
}

func (f *fluxNet) channels() int { return f.cfg.LatentChannels() }

func (f *fluxNet) multiple() int { return f.cfg.Patch }

// patchify turns a latent [C, h, w] into patch tokens [rows·cols][C·p·p].
func patchify(x []float32, c, h, w, p int) []float32 {
	rows, cols := h/p, w/p
	out := make([]float32, len(x))
	n := 0
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			for ch := 0; ch < c; ch++ {
				for pr := 0; pr < p; pr++ {
					row := x[(ch*h+i*p+pr)*w+j*p:]
					for pc := 0; pc < p; pc++ {
						out[n] = row[pc]
						n++
					}
				}
			}
		}
	}
	return out
}

// unpatchify is patchify's inverse.
func unpatchify(t []float32, c, h, w, p int) []float32 {
	rows, cols := h/p, w/p
	out := make([]float32, len(t))
	n := 0
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			for ch := 0; ch < c; ch++ {
				for pr := 0; pr < p; pr++ {
					row := out[(ch*h+i*p+pr)*w+j*p:]
					for pc := 0; pc < p; pc++ {
						row[pc] = t[n]
						n++
					}
				}
			}
		}
	}
	return out
}

func (f *fluxNet) build(g *builder, in *netInput) (native.Tensor, []input, []blockTensor) {
	cfg := f.cfg
	c := in.cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("flux: text tokens %d wide, txt_in takes %d", c.Dim, cfg.ContextDim)})
	}
	if cfg.VecDim > 0 && len(c.Vector) != cfg.VecDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("flux: pooled vector of %d values, vector_in takes %d", len(c.Vector), cfg.VecDim)})
	}
	p := cfg.Patch
	ch := cfg.LatentChannels()
	rows, cols := in.h/p, in.w/p
	li := int64(rows * cols)
	img := newInput(g, formats.F32, int64(cfg.InChannels), li)
	txt := newInput(g, formats.F32, int64(c.Dim), int64(c.Tokens))
	t := newInput(g, formats.F32, 1)
	half := int64(cfg.HeadDim / 2)
	l := int64(c.Tokens) + li
	cos := newInput(g, formats.F32, half, l)
	sin := newInput(g, formats.F32, half, l)
	cv, sv := fluxRoPE(cfg.Axes, cfg.Theta, c.Tokens, rows, cols)
	ins := []input{
		{t: img, f32: patchify(in.x, ch, in.h, in.w, p)}, {t: txt, f32: c.Context},
		{t: t, f32: []float32{in.t}}, {t: cos, f32: cv}, {t: sin, f32: sv},
	}
	var guid native.Tensor // an input the graph does not read is never allocated
	if cfg.Guidance {
		guid = newInput(g, formats.F32, 1)
		ins = append(ins, input{t: guid, f32: []float32{in.guidance}})
	}
	var y native.Tensor
	if cfg.VecDim > 0 {
		y = newInput(g, formats.F32, int64(cfg.VecDim))
		ins = append(ins, input{t: y, f32: c.Vector})
	}
	out, blocks := g.flux(cfg, img, txt, t, guid, y, cos, sin, in.capture)
	return out, ins, blocks
}

// mapOutput turns the graph's patch tokens back into a latent [C, h, w].
func (f *fluxNet) mapOutput(out []float32, in *netInput) []float32 {
	return unpatchify(out, f.cfg.LatentChannels(), in.h, in.w, f.cfg.Patch)
}

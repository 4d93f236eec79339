package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// sd3Net is the SD 3 / 3.5 MMDiT as a network (Family.Network "mmdit"):
// the latent is cut into patches in Go (patchify: the patch kernel's
// layout, channel slowest) and the output tokens, channel fastest, are put
// back by unpatchifyLast.
type sd3Net struct {
	cfg *SD3Config
}

func init() {
	networks["mmdit"] = func(m *Model) (network, error) {
		cfg, ok := m.Config.Network.(*SD3Config)
		if !ok {
			return nil, fmt.Errorf("%s: no MMDiT configuration", m.Path)
		}
		return &sd3Net{cfg: cfg}, nil
	}
}

func (n *sd3Net) channels() int { return n.cfg.LatentChannels() }

func (n *sd3Net) multiple() int { return n.cfg.Patch }

func (n *sd3Net) build(g *builder, in *netInput) (native.Tensor, []input, []blockTensor) {
	cfg, c := n.cfg, in.cond
	if c.Dim != cfg.ContextDim || len(c.Vector) != cfg.ADMIn {
		panic(&native.ShapeError{Msg: fmt.Sprintf("mmdit: text tokens %d wide and a vector of %d, the model takes %d and %d", c.Dim, len(c.Vector), cfg.ContextDim, cfg.ADMIn)})
	}
	p := cfg.Patch
	rows, cols := in.h/p, in.w/p
	img := newInput(g, formats.F32, int64(cfg.InChannels*p*p), int64(rows*cols))
	txt := newInput(g, formats.F32, int64(c.Dim), int64(c.Tokens))
	t := newInput(g, formats.F32, 1)
	y := newInput(g, formats.F32, int64(cfg.ADMIn))
	ins := []input{
		{t: img, f32: patchify(in.x, cfg.InChannels, in.h, in.w, p)}, {t: txt, f32: c.Context},
		{t: t, f32: []float32{in.t}}, {t: y, f32: c.Vector},
	}
	out, blocks := g.sd3(cfg, img, txt, t, y, rows, cols, in.capture)
	return out, ins, blocks
}

// mapOutput turns the output tokens back into a latent [C, h, w].
func (n *sd3Net) mapOutput(out []float32, in *netInput) []float32 {
	return unpatchifyLast(out, n.cfg.OutChannels, in.h, in.w, n.cfg.Patch)
}

// unpatchifyLast puts patch tokens [rows·cols][p·p·C] whose features run
// channel fastest (feature (row·p + col)·C + channel, sd.cpp's
// patch_last=false) back into a latent [C, h, w].
func unpatchifyLast(t []float32, c, h, w, p int) []float32 {
	rows, cols := h/p, w/p
	out := make([]float32, len(t))
	n := 0
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			for pr := 0; pr < p; pr++ {
				for pc := 0; pc < p; pc++ {
					for ch := 0; ch < c; ch++ {
						out[(ch*h+i*p+pr)*w+j*p+pc] = t[n]
						n++
					}
				}
			}
		}
	}
	return out
}

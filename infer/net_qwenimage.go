package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// qwenImageNet is the Qwen-Image MMDiT as a network (Family.Network
// "qwen_image"): the latent [C, h, w] is cut into 2×2 patches in Go with
// Flux's layout (sd.cpp's DiT::patchify is the same), the graph returns
// patch tokens, and mapOutput puts them back.
type qwenImageNet struct {
	cfg *QwenImageConfig
}

func init() {
	networks["qwen_image"] = func(m *Model) (network, error) {
		cfg, ok := m.Config.Network.(*QwenImageConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Qwen-Image configuration", m.Path)
		}
		if cfg.ZeroCondT {
			return nil, fmt.Errorf("%s: a Qwen-Image Edit 2511 DiT (__index_timestep_zero__) needs reference images, which generate does not take", m.Path)
		}
		return &qwenImageNet{cfg: cfg}, nil
	}
}

func (q *qwenImageNet) channels() int { return q.cfg.LatentChannels() }

func (q *qwenImageNet) multiple() int { return q.cfg.Patch }

func (q *qwenImageNet) build(g *builder, in *netInput) (native.Tensor, []input, []blockTensor) {
	cfg := q.cfg
	c := in.cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("qwen_image: text tokens %d wide, txt_in takes %d", c.Dim, cfg.ContextDim)})
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
	cv, sv := ropeTable(cfg.Axes, cfg.Theta, qwenImagePositions(c.Tokens, rows, cols))
	ins := []input{
		{t: img, f32: patchify(in.x, cfg.LatentChannels(), in.h, in.w, p)}, {t: txt, f32: c.Context},
		{t: t, f32: []float32{in.t}}, {t: cos, f32: cv}, {t: sin, f32: sv},
	}
	out, blocks := g.qwenImage(cfg, img, txt, t, cos, sin, in.capture)
	return out, ins, blocks
}

// mapOutput turns the graph's patch tokens back into a latent [C, h, w].
func (q *qwenImageNet) mapOutput(out []float32, in *netInput) []float32 {
	return unpatchify(out, q.cfg.LatentChannels(), in.h, in.w, q.cfg.Patch)
}

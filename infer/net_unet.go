package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// unetNet is the LDM UNet as a network (Family.Network "unet"): SD 1.x/2.x,
// and SDXL with its class embedding of the conditioning vector.
type unetNet struct {
	cfg *UNetConfig
}

func init() {
	networks["unet"] = func(m *Model) (network, error) {
		cfg, ok := m.Config.Network.(*UNetConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no UNet configuration", m.Path)
		}
		return &unetNet{cfg: cfg}, nil
	}
}

func (u *unetNet) channels() int { return u.cfg.InChannels }

// multiple is the UNet's total downsampling: one halving per level after the first.
func (u *unetNet) multiple() int { return 1 << (len(u.cfg.ChannelMult) - 1) }

func (u *unetNet) build(g *builder, in *netInput) (native.Tensor, []input, []blockTensor) {
	cfg := u.cfg
	c := in.cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("unet: context of width %d, the UNet's is %d", c.Dim, cfg.ContextDim)})
	}
	xt := newInput(g, formats.F32, int64(in.w), int64(in.h), int64(cfg.InChannels), 1)
	tt := newInput(g, formats.F32, 1)
	ct := newInput(g, formats.F32, int64(c.Dim), int64(c.Tokens), 1)
	ins := []input{{t: xt, f32: in.x}, {t: tt, f32: []float32{in.t}}, {t: ct, f32: c.Context}}
	var yt native.Tensor
	if cfg.ADMChannels > 0 {
		if len(c.Vector) != cfg.ADMChannels {
			panic(&native.ShapeError{Msg: fmt.Sprintf("unet: conditioning vector of %d values, label_emb takes %d", len(c.Vector), cfg.ADMChannels)})
		}
		yt = newInput(g, formats.F32, int64(cfg.ADMChannels), 1)
		ins = append(ins, input{t: yt, f32: c.Vector})
	}
	y, blocks := g.unet(cfg, xt, tt, ct, yt, in.capture)
	return y, ins, blocks
}

package sd

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// unetNet is the LDM UNet as a network (Family.Network "unet"): SD 1.x/2.x,
// and SDXL with its class embedding of the conditioning vector.
type unetNet struct {
	cfg *UNetConfig
}

func init() {
	infer.RegisterNetwork("unet", func(m *infer.Model) (infer.Network, error) {
		cfg, ok := m.Config.Network.(*UNetConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no UNet configuration", m.Path)
		}
		return &unetNet{cfg: cfg}, nil
	})
}

// Channels returns the latent channels the network takes and returns (infer.Network).
func (u *unetNet) Channels() int { return u.cfg.InChannels }

// Multiple is the UNet's total downsampling: one halving per level after the first.
// Multiple returns what the latent's width and height must be a multiple of (infer.Network).
func (u *unetNet) Multiple() int { return 1 << (len(u.cfg.ChannelMult) - 1) }

// Build builds one evaluation of the network for in (infer.Network).
func (u *unetNet) Build(g *infer.Builder, in *infer.NetInput) (native.Tensor, []infer.Input, []infer.BlockTensor) {
	cfg := u.cfg
	c := in.Cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("unet: context of width %d, the UNet's is %d", c.Dim, cfg.ContextDim)})
	}
	xt := infer.NewInput(g, formats.F32, int64(in.W), int64(in.H), int64(cfg.InChannels), 1)
	tt := infer.NewInput(g, formats.F32, 1)
	ct := infer.NewInput(g, formats.F32, int64(c.Dim), int64(c.Tokens), 1)
	ins := []infer.Input{{T: xt, F32: in.X}, {T: tt, F32: []float32{in.T}}, {T: ct, F32: c.Context}}
	var yt native.Tensor
	if cfg.ADMChannels > 0 {
		if len(c.Vector) != cfg.ADMChannels {
			panic(&native.ShapeError{Msg: fmt.Sprintf("unet: conditioning vector of %d values, label_emb takes %d", len(c.Vector), cfg.ADMChannels)})
		}
		yt = infer.NewInput(g, formats.F32, int64(cfg.ADMChannels), 1)
		ins = append(ins, infer.Input{T: yt, F32: c.Vector})
	}
	y, blocks := unet(g, cfg, xt, tt, ct, yt, in.Capture)
	return y, ins, blocks
}

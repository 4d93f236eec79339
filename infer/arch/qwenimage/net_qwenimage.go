package qwenimage

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
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
	infer.RegisterNetwork("qwen_image", func(m *infer.Model) (infer.Network, error) {
		cfg, ok := m.Config.Network.(*QwenImageConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Qwen-Image configuration", m.Path)
		}
		if cfg.ZeroCondT {
			return nil, fmt.Errorf("%s: a Qwen-Image Edit 2511 DiT (__index_timestep_zero__) needs reference images, which generate does not take", m.Path)
		}
		return &qwenImageNet{cfg: cfg}, nil
	})
}

// Channels returns the latent channels the network takes and returns (infer.Network).
func (q *qwenImageNet) Channels() int { return q.cfg.LatentChannels() }

// Multiple returns what the latent's width and height must be a multiple of (infer.Network).
func (q *qwenImageNet) Multiple() int { return q.cfg.Patch }

// Build builds one evaluation of the network for in (infer.Network).
func (q *qwenImageNet) Build(g *infer.Builder, in *infer.NetInput) (native.Tensor, []infer.Input, []infer.BlockTensor) {
	cfg := q.cfg
	c := in.Cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("qwen_image: text tokens %d wide, txt_in takes %d", c.Dim, cfg.ContextDim)})
	}
	p := cfg.Patch
	rows, cols := in.H/p, in.W/p
	cv, sv := flux.RoPETable(cfg.Axes, cfg.Theta, qwenImagePositions(c.Tokens, rows, cols))
	d, ins := flux.NewDiTInputs(g, in, flux.Patchify(in.X, cfg.LatentChannels(), in.H, in.W, p), cfg.InChannels, cv, sv, cfg.HeadDim/2)
	out, blocks := qwenImage(g, cfg, d.Img, d.Txt, d.T, d.Cos, d.Sin, in.Capture)
	return out, ins, blocks
}

// MapOutput turns the graph's patch tokens back into a latent [C, h, w].
func (q *qwenImageNet) MapOutput(out []float32, in *infer.NetInput) []float32 {
	return flux.Unpatchify(out, q.cfg.LatentChannels(), in.H, in.W, q.cfg.Patch)
}

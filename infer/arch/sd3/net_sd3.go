package sd3

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
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
	infer.RegisterNetwork("mmdit", func(m *infer.Model) (infer.Network, error) {
		cfg, ok := m.Config.Network.(*SD3Config)
		if !ok {
			return nil, fmt.Errorf("%s: no MMDiT configuration", m.Path)
		}
		return &sd3Net{cfg: cfg}, nil
	})
}

// Channels returns the latent channels the network takes and returns (infer.Network).
func (n *sd3Net) Channels() int { return n.cfg.LatentChannels() }

// Multiple returns what the latent's width and height must be a multiple of (infer.Network).
func (n *sd3Net) Multiple() int { return n.cfg.Patch }

// Build builds one evaluation of the network for in (infer.Network).
func (n *sd3Net) Build(g *infer.Builder, in *infer.NetInput) (native.Tensor, []infer.Input, []infer.BlockTensor) {
	cfg, c := n.cfg, in.Cond
	if c.Dim != cfg.ContextDim || len(c.Vector) != cfg.ADMIn {
		panic(&native.ShapeError{Msg: fmt.Sprintf("mmdit: text tokens %d wide and a vector of %d, the model takes %d and %d", c.Dim, len(c.Vector), cfg.ContextDim, cfg.ADMIn)})
	}
	p := cfg.Patch
	rows, cols := in.H/p, in.W/p
	img := infer.NewInput(g, formats.F32, int64(cfg.InChannels*p*p), int64(rows*cols))
	txt := infer.NewInput(g, formats.F32, int64(c.Dim), int64(c.Tokens))
	t := infer.NewInput(g, formats.F32, 1)
	y := infer.NewInput(g, formats.F32, int64(cfg.ADMIn))
	ins := []infer.Input{
		{T: img, F32: flux.Patchify(in.X, cfg.InChannels, in.H, in.W, p)}, {T: txt, F32: c.Context},
		{T: t, F32: []float32{in.T}}, {T: y, F32: c.Vector},
	}
	out, blocks := sd3(g, cfg, img, txt, t, y, rows, cols, in.Capture)
	return out, ins, blocks
}

// MapOutput turns the output tokens back into a latent [C, h, w].
func (n *sd3Net) MapOutput(out []float32, in *infer.NetInput) []float32 {
	return unpatchifyLast(out, n.cfg.OutChannels, in.H, in.W, n.cfg.Patch)
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

package wan

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/native"
)

// wanNet is the Wan DiT as a network (Family.Network "wan"): the latent
// [C, T, h, w] is cut into patches frame by frame in Go (feature c·ph·pw +
// row·pw + col, as the Conv3d kernel reads them), the graph returns the
// head's tokens, and mapOutput puts them back into the latent's layout.
type wanNet struct {
	cfg *WanConfig
}

func init() {
	infer.RegisterNetwork("wan", func(m *infer.Model) (infer.Network, error) {
		cfg, ok := m.Config.Network.(*WanConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Wan configuration", m.Path)
		}
		return &wanNet{cfg: cfg}, nil
	})
}

// Channels returns the latent channels the network takes and returns (infer.Network).
func (n *wanNet) Channels() int { return n.cfg.OutChannels }

// HighNoise returns Wan 2.2 A14B's high-noise expert as a network of its own.
func (n *wanNet) HighNoise() infer.Network {
	if n.cfg.HighNoise == nil {
		return nil
	}
	return &wanNet{cfg: n.cfg.HighNoise}
}

// Multiple returns what the latent's width and height must be a multiple of (infer.Network).
func (n *wanNet) Multiple() int { return n.cfg.PatchH }

// wanPatchify turns a latent [C, T, h, w] into patch tokens [T·rows·cols][C·p·p].
func wanPatchify(x []float32, c, t, h, w, p int) []float32 {
	rows, cols := h/p, w/p
	out := make([]float32, 0, c*t*rows*cols*p*p)
	for f := 0; f < t; f++ {
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				for ch := 0; ch < c; ch++ {
					for pr := 0; pr < p; pr++ {
						row := x[((ch*t+f)*h+i*p+pr)*w+j*p:]
						out = append(out, row[:p]...)
					}
				}
			}
		}
	}
	return out
}

// wanUnpatchify turns the head's tokens [T·rows·cols][p·p·C] (channel
// fastest, as Wan's unpatchify reads them) into a latent [C, T, h, w].
func wanUnpatchify(tok []float32, c, t, h, w, p int) []float32 {
	rows, cols := h/p, w/p
	out := make([]float32, c*t*h*w)
	n := 0
	for f := 0; f < t; f++ {
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				for pr := 0; pr < p; pr++ {
					for pc := 0; pc < p; pc++ {
						for ch := 0; ch < c; ch++ {
							out[((ch*t+f)*h+i*p+pr)*w+j*p+pc] = tok[n]
							n++
						}
					}
				}
			}
		}
	}
	return out
}

// Build builds one evaluation of the network for in (infer.Network).
func (n *wanNet) Build(g *infer.Builder, in *infer.NetInput) (native.Tensor, []infer.Input, []infer.BlockTensor) {
	cfg := n.cfg
	c := in.Cond
	if cfg.InChannels != cfg.OutChannels {
		panic(&native.ShapeError{Msg: fmt.Sprintf("wan: the patch embedding takes %d channels and the head gives %d: image-to-video models are not supported", cfg.InChannels, cfg.OutChannels)})
	}
	if c.Dim != cfg.TextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("wan: text tokens %d wide, text_embedding takes %d", c.Dim, cfg.TextDim)})
	}
	p, frames := cfg.PatchH, max(in.Frames, 1)
	rows, cols := in.H/p, in.W/p
	cv, sv := wanRoPE(cfg.Axes, cfg.Theta, frames, rows, cols)
	d, ins := flux.NewDiTInputs(g, in, wanPatchify(in.X, cfg.InChannels, frames, in.H, in.W, p), cfg.InChannels*p*p, cv, sv, cfg.HeadDim/2)
	if in.FrameT != nil {
		d.T, ins = wanFrameTimesteps(g, in, d.T, ins)
	}
	out, blocks := wan(g, cfg, d.Img, d.Txt, d.T, d.Cos, d.Sin, in.Capture)
	return out, ins, blocks
}

// MapOutput turns the head's tokens back into a latent [C, T, h, w].
func (n *wanNet) MapOutput(out []float32, in *infer.NetInput) []float32 {
	return wanUnpatchify(out, n.cfg.OutChannels, max(in.Frames, 1), in.H, in.W, n.cfg.PatchH)
}

// wanFrameTimesteps replaces the one-timestep input t among ins with one
// of a timestep per latent frame (in.FrameT, image-to-video).
func wanFrameTimesteps(g *infer.Builder, in *infer.NetInput, t native.Tensor, ins []infer.Input) (native.Tensor, []infer.Input) {
	if len(in.FrameT) != max(in.Frames, 1) {
		panic(&native.ShapeError{Msg: fmt.Sprintf("wan: %d frame timesteps for %d latent frames", len(in.FrameT), in.Frames)})
	}
	ft := infer.NewInput(g, formats.F32, int64(len(in.FrameT)))
	for i := range ins {
		if ins[i].T == t {
			ins[i] = infer.Input{T: ft, F32: in.FrameT}
		}
	}
	return ft, ins
}

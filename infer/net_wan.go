package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
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
	networks["wan"] = func(m *Model) (network, error) {
		cfg, ok := m.Config.Network.(*WanConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Wan configuration", m.Path)
		}
		return &wanNet{cfg: cfg}, nil
	}
}

func (n *wanNet) channels() int { return n.cfg.OutChannels }

func (n *wanNet) multiple() int { return n.cfg.PatchH }

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

func (n *wanNet) build(g *builder, in *netInput) (native.Tensor, []input, []blockTensor) {
	cfg := n.cfg
	c := in.cond
	if cfg.InChannels != cfg.OutChannels {
		panic(&native.ShapeError{Msg: fmt.Sprintf("wan: the patch embedding takes %d channels and the head gives %d: image-to-video models are not supported", cfg.InChannels, cfg.OutChannels)})
	}
	if c.Dim != cfg.TextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("wan: text tokens %d wide, text_embedding takes %d", c.Dim, cfg.TextDim)})
	}
	p, frames := cfg.PatchH, max(in.frames, 1)
	rows, cols := in.h/p, in.w/p
	l := int64(frames * rows * cols)
	img := newInput(g, formats.F32, int64(cfg.InChannels*p*p), l)
	txt := newInput(g, formats.F32, int64(c.Dim), int64(c.Tokens))
	t := newInput(g, formats.F32, 1)
	half := int64(cfg.HeadDim / 2)
	cos := newInput(g, formats.F32, half, l)
	sin := newInput(g, formats.F32, half, l)
	cv, sv := wanRoPE(cfg.Axes, cfg.Theta, frames, rows, cols)
	ins := []input{
		{t: img, f32: wanPatchify(in.x, cfg.InChannels, frames, in.h, in.w, p)}, {t: txt, f32: c.Context},
		{t: t, f32: []float32{in.t}}, {t: cos, f32: cv}, {t: sin, f32: sv},
	}
	out, blocks := g.wan(cfg, img, txt, t, cos, sin, in.capture)
	return out, ins, blocks
}

// mapOutput turns the head's tokens back into a latent [C, T, h, w].
func (n *wanNet) mapOutput(out []float32, in *netInput) []float32 {
	return wanUnpatchify(out, n.cfg.OutChannels, max(in.frames, 1), in.h, in.w, n.cfg.PatchH)
}

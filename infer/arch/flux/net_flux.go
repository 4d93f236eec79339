package flux

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
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
	infer.RegisterNetwork("flux", func(m *infer.Model) (infer.Network, error) {
		cfg, ok := m.Config.Network.(*FluxConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Flux configuration", m.Path)
		}
		return &fluxNet{cfg: cfg}, nil
	})
}

// Channels returns the latent channels the network takes and returns (infer.Network).
func (f *fluxNet) Channels() int { return f.cfg.LatentChannels() }

// Multiple returns what the latent's width and height must be a multiple of (infer.Network).
func (f *fluxNet) Multiple() int { return f.cfg.Patch }

// Patchify turns a latent [C, h, w] into patch tokens [rows·cols][C·p·p].
func Patchify(x []float32, c, h, w, p int) []float32 {
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

// Unpatchify is patchify's inverse.
func Unpatchify(t []float32, c, h, w, p int) []float32 {
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

// Build builds one evaluation of the network for in (infer.Network).
func (f *fluxNet) Build(g *infer.Builder, in *infer.NetInput) (native.Tensor, []infer.Input, []infer.BlockTensor) {
	cfg := f.cfg
	c := in.Cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("flux: text tokens %d wide, txt_in takes %d", c.Dim, cfg.ContextDim)})
	}
	if cfg.VecDim > 0 && len(c.Vector) != cfg.VecDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("flux: pooled vector of %d values, vector_in takes %d", len(c.Vector), cfg.VecDim)})
	}
	p := cfg.Patch
	ch := cfg.LatentChannels()
	rows, cols := in.H/p, in.W/p
	cv, sv := fluxRoPE(cfg.Axes, cfg.Theta, c.Tokens, rows, cols)
	d, ins := NewDiTInputs(g, in, Patchify(in.X, ch, in.H, in.W, p), cfg.InChannels, cv, sv, cfg.HeadDim/2)
	var guid native.Tensor // an input the graph does not read is never allocated
	if cfg.Guidance {
		guid = infer.NewInput(g, formats.F32, 1)
		ins = append(ins, infer.Input{T: guid, F32: []float32{in.Guidance}})
	}
	var y native.Tensor
	if cfg.VecDim > 0 {
		y = infer.NewInput(g, formats.F32, int64(cfg.VecDim))
		ins = append(ins, infer.Input{T: y, F32: c.Vector})
	}
	out, blocks := flux(g, cfg, d.Img, d.Txt, d.T, guid, y, d.Cos, d.Sin, in.Capture)
	return out, ins, blocks
}

// MapOutput turns the graph's patch tokens back into a latent [C, h, w].
func (f *fluxNet) MapOutput(out []float32, in *infer.NetInput) []float32 {
	return Unpatchify(out, f.cfg.LatentChannels(), in.H, in.W, f.cfg.Patch)
}

package flux

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// flux2Net is the Flux.2 DiT as a network (Family.Network "flux2"). The
// engine's latent [32, h, w] holds, in the same memory order, sd.cpp's
// [128, h/2, w/2] (the 2×2 patches of the VAE latent, normalized: VAE kind
// "flux2"), so each of its h/2·w/2 cells is one image token of 128 values
// and the sampler's noise is sd-cli's, value for value.
type flux2Net struct {
	cfg *Flux2Config
}

func init() {
	infer.RegisterNetwork("flux2", func(m *infer.Model) (infer.Network, error) {
		cfg, ok := m.Config.Network.(*Flux2Config)
		if !ok {
			return nil, fmt.Errorf("%s: no Flux.2 configuration", m.Path)
		}
		return &flux2Net{cfg: cfg}, nil
	})
}

// Channels returns the latent channels the network takes and returns (infer.Network).
func (f *flux2Net) Channels() int { return f.cfg.LatentChannels() }

// Multiple returns what the latent's width and height must be a multiple of (infer.Network).
func (f *flux2Net) Multiple() int { return f.cfg.Patch }

// Build builds one evaluation of the network for in (infer.Network).
func (f *flux2Net) Build(g *infer.Builder, in *infer.NetInput) (native.Tensor, []infer.Input, []infer.BlockTensor) {
	cfg := f.cfg
	c := in.Cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("flux2: text tokens %d wide, txt_in takes %d", c.Dim, cfg.ContextDim)})
	}
	p := cfg.Patch
	rows, cols := in.H/p, in.W/p
	img := Patchify(in.X, cfg.InChannels, rows, cols, 1)
	// Reference images' tokens follow the image's (sd.cpp concatenates
	// them along the token axis); MapOutput keeps the image's.
	grids := make([][2]int, len(in.Refs))
	for i, r := range in.Refs {
		grids[i] = [2]int{r.H / p, r.W / p}
		img = append(img, Patchify(r.X, cfg.InChannels, r.H/p, r.W/p, 1)...)
	}
	cv, sv := flux2RoPE(cfg.Axes, cfg.Theta, c.Tokens, rows, cols, grids)
	d, ins := NewDiTInputs(g, in, img, cfg.InChannels, cv, sv, cfg.HeadDim/2)
	var guid native.Tensor
	if cfg.Guidance {
		guid = infer.NewInput(g, formats.F32, 1)
		ins = append(ins, infer.Input{T: guid, F32: []float32{in.Guidance}})
	}
	out, blocks := flux2(g, cfg, d.Img, d.Txt, d.T, guid, d.Cos, d.Sin, in.Capture)
	return out, ins, blocks
}

// MapOutput turns the graph's image tokens (those before any reference
// image's, which sd.cpp crops off) back into the latent's layout.
func (f *flux2Net) MapOutput(out []float32, in *infer.NetInput) []float32 {
	p := f.cfg.Patch
	rows, cols := in.H/p, in.W/p
	return Unpatchify(out[:f.cfg.InChannels*rows*cols], f.cfg.InChannels, rows, cols, 1)
}

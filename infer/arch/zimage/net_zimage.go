package zimage

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/native"
)

// zimageNet is the Z-Image DiT as a network (Family.Network "zimage"): the
// latent [C, h, w] is cut into p×p patches in Go with the channel
// innermost (feature (row·p + col)·C + c, patches row-major, as sd.cpp's
// patchify with the patch first), the graph returns the image's patch
// tokens, and mapOutput puts them back, negated as sd.cpp does (the DiT
// predicts data minus noise, the sampler wants the velocity).
type zimageNet struct {
	cfg *ZImageConfig
}

func init() {
	infer.RegisterNetwork("zimage", func(m *infer.Model) (infer.Network, error) {
		cfg, ok := m.Config.Network.(*ZImageConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Z-Image configuration", m.Path)
		}
		return &zimageNet{cfg: cfg}, nil
	})
}

// Channels returns the latent channels the network takes and returns (infer.Network).
func (z *zimageNet) Channels() int { return z.cfg.LatentChannels() }

// Multiple returns what the latent's width and height must be a multiple of (infer.Network).
func (z *zimageNet) Multiple() int { return z.cfg.Patch }

// zimagePatchify turns a latent [C, h, w] into patch tokens [rows·cols][p·p·C].
func zimagePatchify(x []float32, c, h, w, p int) []float32 {
	rows, cols := h/p, w/p
	out := make([]float32, 0, len(x))
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			for pr := 0; pr < p; pr++ {
				for pc := 0; pc < p; pc++ {
					for ch := 0; ch < c; ch++ {
						out = append(out, x[(ch*h+i*p+pr)*w+j*p+pc])
					}
				}
			}
		}
	}
	return out
}

// zimageUnpatchify is zimagePatchify's inverse, each value scaled by s.
func zimageUnpatchify(t []float32, c, h, w, p int, s float32) []float32 {
	rows, cols := h/p, w/p
	out := make([]float32, len(t))
	n := 0
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			for pr := 0; pr < p; pr++ {
				for pc := 0; pc < p; pc++ {
					for ch := 0; ch < c; ch++ {
						out[(ch*h+i*p+pr)*w+j*p+pc] = s * t[n]
						n++
					}
				}
			}
		}
	}
	return out
}

// Build builds one evaluation of the network for in (infer.Network).
func (z *zimageNet) Build(g *infer.Builder, in *infer.NetInput) (native.Tensor, []infer.Input, []infer.BlockTensor) {
	cfg := z.cfg
	c := in.Cond
	if c.Dim != cfg.CapDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("z_image: text tokens %d wide, cap_embedder takes %d", c.Dim, cfg.CapDim)})
	}
	p := cfg.Patch
	rows, cols := in.H/p, in.W/p
	cv, sv := flux.RoPETable(cfg.Axes, cfg.Theta, zimagePositions(c.Tokens, rows, cols))
	d, ins := flux.NewDiTInputs(g, in, zimagePatchify(in.X, cfg.InChannels, in.H, in.W, p), p*p*cfg.InChannels, cv, sv, cfg.HeadDim/2)
	out, blocks := zimage(g, cfg, d.Img, d.Txt, d.T, d.Cos, d.Sin, in.Capture)
	return out, ins, blocks
}

// MapOutput turns the graph's patch tokens back into a latent [C, h, w], negated.
func (z *zimageNet) MapOutput(out []float32, in *infer.NetInput) []float32 {
	return zimageUnpatchify(out, z.cfg.OutChannels, in.H, in.W, z.cfg.Patch, -1)
}

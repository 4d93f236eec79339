package zimage

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
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
	infer.Networks["zimage"] = func(m *infer.Model) (infer.Network, error) {
		cfg, ok := m.Config.Network.(*ZImageConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Z-Image configuration", m.Path)
		}
		return &zimageNet{cfg: cfg}, nil
	}
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
	pos := zimagePositions(c.Tokens, rows, cols)
	half := int64(cfg.HeadDim / 2)
	img := infer.NewInput(g, formats.F32, int64(p*p*cfg.InChannels), int64(rows*cols))
	txt := infer.NewInput(g, formats.F32, int64(c.Dim), int64(c.Tokens))
	t := infer.NewInput(g, formats.F32, 1)
	cos := infer.NewInput(g, formats.F32, half, int64(len(pos)))
	sin := infer.NewInput(g, formats.F32, half, int64(len(pos)))
	cv, sv := zimageRoPETable(cfg.Axes, cfg.Theta, pos)
	ins := []infer.Input{
		{T: img, F32: zimagePatchify(in.X, cfg.InChannels, in.H, in.W, p)}, {T: txt, F32: c.Context},
		{T: t, F32: []float32{in.T}}, {T: cos, F32: cv}, {T: sin, F32: sv},
	}
	out, blocks := zimage(g, cfg, img, txt, t, cos, sin, in.Capture)
	return out, ins, blocks
}

// MapOutput turns the graph's patch tokens back into a latent [C, h, w], negated.
func (z *zimageNet) MapOutput(out []float32, in *infer.NetInput) []float32 {
	return zimageUnpatchify(out, z.cfg.OutChannels, in.H, in.W, z.cfg.Patch, -1)
}

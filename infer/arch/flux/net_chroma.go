package flux

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// chromaNet is Chroma's DiT as a network (Family.Network "chroma"): Flux's
// patch layout (fluxNet's), the approximator's inputs, and the text
// padding mask the conditioner passes in Conditioning.Vector.
type chromaNet struct {
	fluxNet
	cfg *ChromaConfig
}

func init() {
	infer.RegisterNetwork("chroma", func(m *infer.Model) (infer.Network, error) {
		cfg, ok := m.Config.Network.(*ChromaConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Chroma configuration", m.Path)
		}
		return &chromaNet{fluxNet: fluxNet{cfg: &cfg.FluxConfig}, cfg: cfg}, nil
	})
}

// Build builds one evaluation of the network for in (infer.Network).
func (f *chromaNet) Build(g *infer.Builder, in *infer.NetInput) (native.Tensor, []infer.Input, []infer.BlockTensor) {
	cfg := f.cfg
	c := in.Cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("chroma: text tokens %d wide, txt_in takes %d", c.Dim, cfg.ContextDim)})
	}
	p := cfg.Patch
	rows, cols := in.H/p, in.W/p
	li := int64(rows * cols)
	img := infer.NewInput(g, formats.F32, int64(cfg.InChannels), li)
	txt := infer.NewInput(g, formats.F32, int64(c.Dim), int64(c.Tokens))
	half := int64(cfg.HeadDim / 2)
	l := int64(c.Tokens) + li
	cos := infer.NewInput(g, formats.F32, half, l)
	sin := infer.NewInput(g, formats.F32, half, l)
	cv, sv := fluxRoPE(cfg.Axes, cfg.Theta, c.Tokens, rows, cols)
	ts := infer.NewInput(g, formats.F32, chromaModRows)
	gs := infer.NewInput(g, formats.F32, chromaModRows)
	idx := infer.NewInput(g, formats.F32, chromaModRows)
	tv, iv := make([]float32, chromaModRows), make([]float32, chromaModRows)
	for i := range tv {
		tv[i], iv[i] = in.T, float32(i)
	}
	ins := []infer.Input{
		{T: img, F32: Patchify(in.X, cfg.LatentChannels(), in.H, in.W, p)}, {T: txt, F32: c.Context},
		{T: cos, F32: cv}, {T: sin, F32: sv},
		// sd.cpp zeroes Chroma's guidance whatever --guidance says.
		{T: ts, F32: tv}, {T: gs, F32: make([]float32, chromaModRows)}, {T: idx, F32: iv},
	}
	var mask native.Tensor
	if c.Vector != nil {
		if len(c.Vector) != c.Tokens {
			panic(&native.ShapeError{Msg: fmt.Sprintf("chroma: a mask of %d entries for %d text tokens", len(c.Vector), c.Tokens)})
		}
		mask = infer.NewInput(g, formats.F32, l)
		mv := make([]float32, l) // image tokens are never masked
		copy(mv, c.Vector)
		ins = append(ins, infer.Input{T: mask, F32: mv})
	}
	out, blocks := chroma(g, cfg, img, txt, ts, gs, idx, mask, cos, sin, in.Capture)
	return out, ins, blocks
}

// chromaMask is the DiT's key mask over text tokens as sd-cli builds it:
// 0 for a token that is not padding and for the first pad padding tokens
// (chroma_t5_mask_pad), -inf for the rest.
func chromaMask(keep []bool, pad int) []float32 {
	out := make([]float32, len(keep))
	for i, k := range keep {
		switch {
		case k:
		case pad > 0:
			pad--
		default:
			out[i] = float32(math.Inf(-1))
		}
	}
	return out
}

package infer

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/formats"
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
	networks["chroma"] = func(m *Model) (network, error) {
		cfg, ok := m.Config.Network.(*ChromaConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Chroma configuration", m.Path)
		}
		return &chromaNet{fluxNet: fluxNet{cfg: &cfg.FluxConfig}, cfg: cfg}, nil
	}
}

func (f *chromaNet) build(g *builder, in *netInput) (native.Tensor, []input, []blockTensor) {
	cfg := f.cfg
	c := in.cond
	if c.Dim != cfg.ContextDim {
		panic(&native.ShapeError{Msg: fmt.Sprintf("chroma: text tokens %d wide, txt_in takes %d", c.Dim, cfg.ContextDim)})
	}
	p := cfg.Patch
	rows, cols := in.h/p, in.w/p
	li := int64(rows * cols)
	img := newInput(g, formats.F32, int64(cfg.InChannels), li)
	txt := newInput(g, formats.F32, int64(c.Dim), int64(c.Tokens))
	half := int64(cfg.HeadDim / 2)
	l := int64(c.Tokens) + li
	cos := newInput(g, formats.F32, half, l)
	sin := newInput(g, formats.F32, half, l)
	cv, sv := fluxRoPE(cfg.Axes, cfg.Theta, c.Tokens, rows, cols)
	ts := newInput(g, formats.F32, chromaModRows)
	gs := newInput(g, formats.F32, chromaModRows)
	idx := newInput(g, formats.F32, chromaModRows)
	tv, iv := make([]float32, chromaModRows), make([]float32, chromaModRows)
	for i := range tv {
		tv[i], iv[i] = in.t, float32(i)
	}
	ins := []input{
		{t: img, f32: patchify(in.x, cfg.LatentChannels(), in.h, in.w, p)}, {t: txt, f32: c.Context},
		{t: cos, f32: cv}, {t: sin, f32: sv},
		// sd.cpp zeroes Chroma's guidance whatever --guidance says.
		{t: ts, f32: tv}, {t: gs, f32: make([]float32, chromaModRows)}, {t: idx, f32: iv},
	}
	var mask native.Tensor
	if c.Vector != nil {
		if len(c.Vector) != c.Tokens {
			panic(&native.ShapeError{Msg: fmt.Sprintf("chroma: a mask of %d entries for %d text tokens", len(c.Vector), c.Tokens)})
		}
		mask = newInput(g, formats.F32, l)
		mv := make([]float32, l) // image tokens are never masked
		copy(mv, c.Vector)
		ins = append(ins, input{t: mask, f32: mv})
	}
	out, blocks := g.chroma(cfg, img, txt, ts, gs, idx, mask, cos, sin, in.capture)
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

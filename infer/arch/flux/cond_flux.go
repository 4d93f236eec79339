package flux

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/clip"
	"github.com/sdtool/sdtool/infer/encoder/t5"
)

// fluxConditioner is Flux.1's conditioning (Family.Conditioner "flux"), as
// sd.cpp's FluxCLIPEmbedder computes it: the context is T5-XXL's hidden
// states over chunks of 256 tokens (the prompt, </s>, then padding;
// weighted like CLIP's; Model.t5Context), the vector CLIP-L's pooled output (its final norm at the first
// end-of-text token, without text_projection). An absent encoder
// conditions on zeros, as sd-cli does.
type fluxConditioner struct {
	m      *infer.Model
	clip   *clip.CLIPConfig // nil without CLIP-L
	t5     *t5.T5Config     // nil without T5
	tokens int              // T5's sequence length
	ctxDim int              // the DiT's text token width
	vecDim int              // the DiT's pooled vector width
}

func init() {
	infer.RegisterConditioner("flux", func(m *infer.Model) (infer.Conditioner, error) {
		f, ok := m.Config.Network.(*FluxConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Flux configuration", m.Path)
		}
		c := &fluxConditioner{m: m, t5: t5.T5(m.Config), ctxDim: f.ContextDim, vecDim: f.VecDim, tokens: 256}
		for _, e := range m.Family.Encoders {
			if e.Kind == "t5" && e.Tokens > 0 {
				c.tokens = e.Tokens
			}
		}
		if cl, ok := clip.CLIPEncoder(m.Config, "clip_l"); ok {
			c.clip = cl
			if f.VecDim > 0 && cl.Hidden != f.VecDim {
				return nil, fmt.Errorf("%s: CLIP-L is %d wide, the DiT's vector_in takes %d", m.Path, cl.Hidden, f.VecDim)
			}
		}
		if c.t5 != nil {
			if c.t5.Hidden != f.ContextDim {
				return nil, fmt.Errorf("%s: T5 is %d wide, the DiT's txt_in takes %d", m.Path, c.t5.Hidden, f.ContextDim)
			}
		}
		return c, nil
	})
}

// Encode conditions on prompt for a width×height image (infer.Conditioner).
func (c *fluxConditioner) Encode(prompt string, width, height int, zero bool) (*infer.Conditioning, error) {
	m := c.m
	out := &infer.Conditioning{Tokens: c.tokens, Dim: c.ctxDim}
	// The pooled CLIP-L output: sd-cli's first 77-token chunk, pooled at its first end-of-text token.
	if c.vecDim > 0 {
		out.Vector = make([]float32, c.vecDim)
		if c.clip != nil {
			tok := clip.CLIPTokenizer(m)
			ids, _ := tok.EncodeWeightedBreakAsText(prompt, 77, tok.EOS())
			for _, id := range ids {
				if id < 0 || id >= c.clip.Vocab {
					return nil, fmt.Errorf("token id %d outside CLIP-L's %d rows", id, c.clip.Vocab)
				}
			}
			_, pooled, err := clip.RunCLIP(m, c.clip, ids[:77], clip.FirstEOS(ids[:77], tok.EOS()))
			if err != nil {
				return nil, err
			}
			copy(out.Vector, pooled)
		}
	}
	if c.t5 == nil {
		out.Context = make([]float32, c.tokens*c.ctxDim)
		return out, nil
	}
	h, n, err := t5.T5Context(m, t5.T5Tokenizer(m), prompt, c.tokens)
	if err != nil {
		return nil, err
	}
	if zero {
		clear(h)
	}
	out.Context, out.Tokens = h, n
	return out, nil
}

package infer

import (
	"errors"
	"fmt"

	"github.com/sdtool/sdtool/infer/text"
)

// fluxConditioner is Flux.1's conditioning (Family.Conditioner "flux"), as
// sd.cpp's FluxCLIPEmbedder computes it: the context is T5-XXL's hidden
// states over 256 tokens (the prompt, </s>, then padding; weighted like
// CLIP's), the vector CLIP-L's pooled output (its final norm at the first
// end-of-text token, without text_projection). An absent encoder
// conditions on zeros, as sd-cli does.
type fluxConditioner struct {
	m      *Model
	clip   *CLIPConfig // nil without CLIP-L
	t5     *T5Config   // nil without T5
	t5tok  *text.UnigramTokenizer
	tokens int // T5's sequence length
	ctxDim int // the DiT's text token width
	vecDim int // the DiT's pooled vector width
}

func init() {
	conditioners["flux"] = func(m *Model) (conditioner, error) {
		f := m.Config.Flux
		if f == nil {
			return nil, fmt.Errorf("%s: no Flux configuration", m.Path)
		}
		c := &fluxConditioner{m: m, t5: m.Config.T5, ctxDim: f.ContextDim, vecDim: f.VecDim, tokens: 256}
		for _, e := range m.Family.Encoders {
			if e.Kind == "t5" && e.Tokens > 0 {
				c.tokens = e.Tokens
			}
		}
		if cl, ok := m.Config.TextEncoder("clip_l"); ok {
			c.clip = cl
			if f.VecDim > 0 && cl.Hidden != f.VecDim {
				return nil, fmt.Errorf("%s: CLIP-L is %d wide, the DiT's vector_in takes %d", m.Path, cl.Hidden, f.VecDim)
			}
		}
		if c.t5 != nil {
			if c.t5.Hidden != f.ContextDim {
				return nil, fmt.Errorf("%s: T5 is %d wide, the DiT's txt_in takes %d", m.Path, c.t5.Hidden, f.ContextDim)
			}
			tok, err := text.UnigramFromMetadata(m.Path, m.meta)
			switch {
			case err == nil:
				c.t5tok = tok
			case !errors.Is(err, text.ErrNoTokenizer):
				return nil, err
			}
		}
		return c, nil
	}
}

// t5EOS and t5Pad are T5's end-of-text and padding ids (every T5 vocabulary's).
const (
	t5Pad = 0
	t5EOS = 1
)

// t5IDs tokenizes a weighted prompt for T5: its tokens, </s>, then padding
// to c.tokens (a longer prompt is cut to fit, </s> kept), with each token's
// weight. Without a T5 tokenizer only prompts without text tokenize (to
// </s> and padding: what sd-cli's T5 sees when its vocabulary is a stub).
func (c *fluxConditioner) t5IDs(prompt string) ([]int32, []float32, error) {
	var ids []int32
	var weights []float32
	for _, seg := range text.ParseAttention(prompt) {
		var t []int32
		if c.t5tok != nil {
			t = c.t5tok.Encode(seg.Text)
		} else if seg.Text != "" {
			return nil, nil, fmt.Errorf("%s: the prompt needs a T5 tokenizer and no component file carries one (embed one with `sdtool convert --tokenizer`)", c.m.Path)
		}
		ids = append(ids, t...)
		for range t {
			weights = append(weights, seg.Weight)
		}
	}
	if len(ids) > c.tokens-1 {
		ids, weights = ids[:c.tokens-1], weights[:c.tokens-1]
	}
	ids = append(ids, t5EOS)
	weights = append(weights, 1)
	for len(ids) < c.tokens {
		ids = append(ids, t5Pad)
		weights = append(weights, 1)
	}
	return ids, weights, nil
}

func (c *fluxConditioner) encode(prompt string, width, height int, zero bool) (*Conditioning, error) {
	m := c.m
	out := &Conditioning{Tokens: c.tokens, Dim: c.ctxDim}
	// The pooled CLIP-L output: sd-cli's first 77-token chunk, pooled at its first end-of-text token.
	if c.vecDim > 0 {
		out.Vector = make([]float32, c.vecDim)
		if c.clip != nil {
			tok := m.Tokenizer
			ids, _ := tok.EncodeWeighted(prompt, 77, tok.EOS())
			for _, id := range ids {
				if id < 0 || id >= c.clip.Vocab {
					return nil, fmt.Errorf("token id %d outside CLIP-L's %d rows", id, c.clip.Vocab)
				}
			}
			cc := &clipConditioner{m: m, fam: m.Family}
			_, pooled, err := cc.run(c.clip, ids[:77], firstEOS(ids[:77], tok.EOS()))
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
	ids, weights, err := c.t5IDs(prompt)
	if err != nil {
		return nil, err
	}
	h, err := m.runT5(c.t5, ids)
	if err != nil {
		return nil, err
	}
	applyWeights(h, weights, c.ctxDim)
	if zero {
		clear(h)
	}
	out.Context = h
	return out, nil
}

package wan

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/t5"
)

// wanConditioner is Wan's conditioning (Family.Conditioner "wan"), as
// sd.cpp's T5CLIPEmbedder computes it for video: UMT5-XXL over chunks of
// wanTextTokens tokens (the prompt, </s>, then padding) with the padding
// masked out as keys inside the encoder, prompt weights applied, and the
// padding's hidden states zeroed. Without a text encoder the context is
// sd-cli's stand-in: 256 tokens of zeros.
type wanConditioner struct {
	m      *infer.Model
	t5     *t5.T5Config // nil without UMT5
	ctxDim int          // the DiT's text token width
}

// wanTextTokens is Wan's text length (sd-cli's chunk for UMT5).
const wanTextTokens = 512

// wanNoTextTokens is the length of the zero context sd-cli conditions on
// when no text encoder is given.
const wanNoTextTokens = 256

func init() { infer.RegisterConditioner("wan", newWanConditioner) }

// newWanConditioner makes the UMT5 conditioner of a loaded Wan model.
func newWanConditioner(m *infer.Model) (infer.Conditioner, error) {
	w, ok := m.Config.Network.(*WanConfig)
	if !ok {
		return nil, fmt.Errorf("%s: no Wan configuration", m.Path)
	}
	c := &wanConditioner{m: m, t5: t5.T5(m.Config), ctxDim: w.TextDim}
	if c.t5 != nil && c.t5.Hidden != w.TextDim {
		return nil, fmt.Errorf("%s: the text encoder is %d wide, the DiT's text_embedding takes %d", m.Path, c.t5.Hidden, w.TextDim)
	}
	return c, nil
}

// Encode conditions on prompt for a width×height image (infer.Conditioner).
func (c *wanConditioner) Encode(prompt string, width, height int, zero bool) (*infer.Conditioning, error) {
	if c.t5 == nil {
		return &infer.Conditioning{Context: make([]float32, wanNoTextTokens*c.ctxDim), Tokens: wanNoTextTokens, Dim: c.ctxDim}, nil
	}
	ctx, keep, err := t5.T5ContextMasked(c.m, t5.T5Tokenizer(c.m), prompt, wanTextTokens, true)
	if err != nil {
		return nil, err
	}
	for i, k := range keep {
		if !k || zero {
			clear(ctx[i*c.ctxDim : (i+1)*c.ctxDim])
		}
	}
	return &infer.Conditioning{Context: ctx, Tokens: len(keep), Dim: c.ctxDim}, nil
}

package flux

import (
	"fmt"
	"math"
	"strconv"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/t5"
	"github.com/sdtool/sdtool/text"
)

// chromaConditioner is Chroma's conditioning (Family.Conditioner
// "chroma"), as sd.cpp's T5CLIPEmbedder computes it: T5-XXL's hidden
// states over chunks of text.ChromaT5Length tokens (the prompt, </s>, then
// padding; weighted like Flux's), and in Conditioning.Vector the DiT's key
// mask over those tokens (chromaMask; nil when the DiT mask is off). The
// settings are sd-cli's model args (LoadOptions.ModelArgs), with its
// defaults: chroma_use_dit_mask true, chroma_use_t5_mask false,
// chroma_t5_mask_pad 1. Without T5 the context is 256 zero tokens, all
// masked, as sd-cli's.
type chromaConditioner struct {
	m      *infer.Model
	t5     *t5.T5Config // nil without T5
	ctxDim int          // the DiT's text token width
	// ditMask, t5Mask and maskPad are sd-cli's chroma_use_dit_mask,
	// chroma_use_t5_mask and chroma_t5_mask_pad.
	ditMask, t5Mask bool
	maskPad         int
}

func init() {
	infer.RegisterConditioner("chroma", func(m *infer.Model) (infer.Conditioner, error) {
		f, ok := m.Config.Network.(*ChromaConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Chroma configuration", m.Path)
		}
		c := &chromaConditioner{m: m, t5: t5.T5(m.Config), ctxDim: f.ContextDim, ditMask: true, maskPad: 1}
		if err := c.readArgs(m.ModelArgs); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		if c.t5 != nil && c.t5.Hidden != f.ContextDim {
			return nil, fmt.Errorf("%s: T5 is %d wide, the DiT's txt_in takes %d", m.Path, c.t5.Hidden, f.ContextDim)
		}
		return c, nil
	})
}

// readArgs takes sd-cli's Chroma model args over the defaults.
func (c *chromaConditioner) readArgs(args map[string]string) error {
	for key, dst := range map[string]*bool{"chroma_use_dit_mask": &c.ditMask, "chroma_use_t5_mask": &c.t5Mask} {
		if v, ok := args[key]; ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("model arg %s=%q: want true or false", key, v)
			}
			*dst = b
		}
	}
	if v, ok := args["chroma_t5_mask_pad"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("model arg chroma_t5_mask_pad=%q: want a count of pad tokens (0 or more)", v)
		}
		c.maskPad = n
	}
	return nil
}

// Encode conditions on prompt for a width×height image (infer.Conditioner).
func (c *chromaConditioner) Encode(prompt string, width, height int, zero bool) (*infer.Conditioning, error) {
	if c.t5 == nil {
		const tokens = 256
		out := &infer.Conditioning{Tokens: tokens, Dim: c.ctxDim, Context: make([]float32, tokens*c.ctxDim)}
		if c.ditMask {
			out.Vector = make([]float32, tokens)
			for i := range out.Vector {
				out.Vector[i] = float32(math.Inf(-1))
			}
		}
		return out, nil
	}
	h, keep, err := t5.T5ContextMasked(c.m, t5.T5Tokenizer(c.m), prompt, text.ChromaT5Length, c.t5Mask)
	if err != nil {
		return nil, err
	}
	if zero {
		clear(h)
	}
	out := &infer.Conditioning{Context: h, Tokens: len(keep), Dim: c.ctxDim}
	if c.ditMask {
		out.Vector = chromaMask(keep, c.maskPad)
	}
	return out, nil
}

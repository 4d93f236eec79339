package flux

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/llm"
)

// KleinPrompt is sd.cpp's text-to-image template of Flux.2 klein: Qwen3's
// chat template with an empty thinking block, the hidden states of layers
// 9, 18 and 27 side by side (Qwen3-4B: 3 × 2560 = klein 4B's 7680), the
// tokens padded with <|endoftext|> to 512, none dropped.
var KleinPrompt = llm.LLMPrompt{
	Before:    "<|im_start|>user\n",
	After:     "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
	Layers:    []int{9, 18, 27},
	MinTokens: 512,
	PadToken:  "<|endoftext|>",
}

// flux2Conditioner is Flux.2's conditioning (Family.Conditioner "flux2"
// for klein, "flux2_dev" for dev), as sd.cpp's LLMEmbedder computes it: the
// prompt in the variant's template (KleinPrompt, DevPrompt), weighted like
// CLIP's, every token's hidden states (padding included) as the context,
// no vector.
type flux2Conditioner struct {
	m      *infer.Model
	prompt llm.LLMPrompt
	dim    int // the DiT's text token width
}

func init() { infer.RegisterConditioner("flux2", flux2ConditionerFor(KleinPrompt)) }

// flux2ConditionerFor returns the constructor of Flux.2's conditioner with
// the template p (klein's or dev's).
func flux2ConditionerFor(p llm.LLMPrompt) func(*infer.Model) (infer.Conditioner, error) {
	return func(m *infer.Model) (infer.Conditioner, error) {
		f, ok := m.Config.Network.(*Flux2Config)
		if !ok {
			return nil, fmt.Errorf("%s: no Flux.2 configuration", m.Path)
		}
		l := llm.LLM(m.Config)
		if l == nil {
			return nil, fmt.Errorf("%s: Flux.2 needs its text encoder (--llm)", m.Path)
		}
		outs, norm := llm.LLMOutputs(l, p.Layers)
		n := len(outs)
		if norm {
			n++
		}
		if l.Hidden*n != f.ContextDim {
			return nil, fmt.Errorf("%s: the LLM gives %d hidden states %d wide (layers %v of %d), the DiT's txt_in takes %d values",
				m.Path, n, l.Hidden, p.Layers, l.Layers, f.ContextDim)
		}
		return &flux2Conditioner{m: m, prompt: p, dim: f.ContextDim}, nil
	}
}

// Encode conditions on prompt for a width×height image (infer.Conditioner).
func (c *flux2Conditioner) Encode(prompt string, width, height int, zero bool) (*infer.Conditioning, error) {
	h, n, err := llm.EncodeLLMPrompt(c.m, prompt, c.prompt)
	if err != nil {
		return nil, err
	}
	if zero {
		clear(h)
	}
	return &infer.Conditioning{Context: h, Tokens: n, Dim: c.dim}, nil
}

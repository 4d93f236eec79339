package qwenimage

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/llm"
)

// qwenImageConditioner is Qwen-Image's conditioning (Family.Conditioner
// "qwen_image"), as sd.cpp's LLMEmbedder computes it for text to image:
// the prompt in Qwen-Image's chat template (QwenImagePrompt), Qwen2.5-VL's
// hidden states after its last layer and final norm, the 34 tokens of the
// system prompt dropped. The context is as long as the prompt: no padding.
type qwenImageConditioner struct {
	m   *infer.Model
	dim int
}

func init() {
	infer.RegisterConditioner("qwen_image", func(m *infer.Model) (infer.Conditioner, error) {
		q, ok := m.Config.Network.(*QwenImageConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Qwen-Image configuration", m.Path)
		}
		llm := llm.LLM(m.Config)
		if llm == nil {
			return nil, fmt.Errorf("%s: Qwen-Image needs its text encoder (Qwen2.5-VL): give it with --llm", m.Path)
		}
		if llm.Hidden != q.ContextDim {
			return nil, fmt.Errorf("%s: the LLM is %d wide, the DiT's txt_in takes %d", m.Path, llm.Hidden, q.ContextDim)
		}
		return &qwenImageConditioner{m: m, dim: q.ContextDim}, nil
	})
}

// Encode conditions on prompt for a width×height image (infer.Conditioner).
func (c *qwenImageConditioner) Encode(prompt string, width, height int, zero bool) (*infer.Conditioning, error) {
	h, n, err := llm.EncodeLLMPrompt(c.m, prompt, llm.QwenImagePrompt)
	if err != nil {
		return nil, err
	}
	if zero {
		clear(h)
	}
	return &infer.Conditioning{Context: h, Tokens: n, Dim: c.dim}, nil
}

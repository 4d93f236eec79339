package zimage

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/llm"
)

// zimageConditioner is Z-Image's conditioning (Family.Conditioner
// "zimage"), as sd.cpp's LLMEmbedder computes it for Z-Image: the prompt
// in Qwen3's chat template (ZImagePrompt), weighted like CLIP's, and the
// hidden states after 35 of Qwen3-4B's 36 layers (after all layers and the
// final norm for a shallower encoder) for every token, template included.
type zimageConditioner struct {
	m   *infer.Model
	dim int // the DiT's caption width, the LLM's
}

func init() {
	infer.RegisterConditioner("zimage", func(m *infer.Model) (infer.Conditioner, error) {
		z, ok := m.Config.Network.(*ZImageConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Z-Image configuration", m.Path)
		}
		l := llm.LLM(m.Config)
		if l == nil {
			return nil, fmt.Errorf("%s: Z-Image needs its Qwen3 text encoder (--llm)", m.Path)
		}
		if l.Hidden != z.CapDim {
			return nil, fmt.Errorf("%s: the LLM is %d wide, the DiT's cap_embedder takes %d", m.Path, l.Hidden, z.CapDim)
		}
		return &zimageConditioner{m: m, dim: z.CapDim}, nil
	})
}

// Encode conditions on prompt for a width×height image (infer.Conditioner).
func (c *zimageConditioner) Encode(prompt string, width, height int, zero bool) (*infer.Conditioning, error) {
	h, n, err := llm.EncodeLLMPrompt(c.m, prompt, llm.ZImagePrompt)
	if err != nil {
		return nil, err
	}
	if zero {
		clear(h)
	}
	return &infer.Conditioning{Context: h, Tokens: n, Dim: c.dim}, nil
}

package infer

import "fmt"

// zimageConditioner is Z-Image's conditioning (Family.Conditioner
// "zimage"), as sd.cpp's LLMEmbedder computes it for Z-Image: the prompt
// in Qwen3's chat template (ZImagePrompt), weighted like CLIP's, and the
// hidden states after 35 of Qwen3-4B's 36 layers (after all layers and the
// final norm for a shallower encoder) for every token, template included.
type zimageConditioner struct {
	m   *Model
	dim int // the DiT's caption width, the LLM's
}

func init() {
	conditioners["zimage"] = func(m *Model) (conditioner, error) {
		z, ok := m.Config.Network.(*ZImageConfig)
		if !ok {
			return nil, fmt.Errorf("%s: no Z-Image configuration", m.Path)
		}
		l := m.Config.llm()
		if l == nil {
			return nil, fmt.Errorf("%s: Z-Image needs its Qwen3 text encoder (--llm)", m.Path)
		}
		if l.Hidden != z.CapDim {
			return nil, fmt.Errorf("%s: the LLM is %d wide, the DiT's cap_embedder takes %d", m.Path, l.Hidden, z.CapDim)
		}
		return &zimageConditioner{m: m, dim: z.CapDim}, nil
	}
}

func (c *zimageConditioner) encode(prompt string, width, height int, zero bool) (*Conditioning, error) {
	h, n, err := c.m.EncodeLLMPrompt(prompt, ZImagePrompt)
	if err != nil {
		return nil, err
	}
	if zero {
		clear(h)
	}
	return &Conditioning{Context: h, Tokens: n, Dim: c.dim}, nil
}

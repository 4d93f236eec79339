package llm

import "github.com/sdtool/sdtool/native"

// llmRope turns x [d, heads, L] by the text encoder's rotary embedding at
// pos. NeoX's pairs (Qwen2.5-VL, Qwen3) go through native.RopeNeoxFMA,
// which rounds as stable-diffusion.cpp's ggml does (its rotation is fused
// multiply-adds there); the linked ggml's separately rounded products left
// the hidden states of a two-layer Qwen2.5-VL with q8_0 weights 0.7%
// apart, enough to hold Qwen-Image's parity at 49.5 dB (BENCHMARKS.md).
func llmRope(c *native.Context, x, pos native.Tensor, cfg *LLMConfig) native.Tensor {
	if cfg.Arch.RopeMode == native.RopeNeox {
		return c.RopeNeoxFMA(x, pos, cfg.HeadDim, cfg.Arch.RopeTheta)
	}
	return c.Rope(x, pos, cfg.HeadDim, cfg.Arch.RopeMode, cfg.Arch.RopeTheta)
}

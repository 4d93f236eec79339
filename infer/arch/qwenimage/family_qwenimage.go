package qwenimage

import (
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/llm"
)

// The Qwen-Image entry of the family table (base, 2512 and Edit share the
// DiT's layout; Edit's reference images are not taken).

// QwenImageFamilies is Qwen-Image: its MMDiT conditioned on Qwen2.5-VL's
// last hidden states, the flow schedule of SD3 with shift 3 (sd-cli's
// default --flow-shift for it), Euler, and Wan 2.1's VAE on one frame.
// The guidance scale is the one sd.cpp's documentation runs it with
// (sd-cli's own default, 7, oversaturates it).
var QwenImageFamilies = []*infer.Family{
	{
		ID: "qwen_image", Title: "Qwen-Image",
		Match: [][]infer.Marker{{
			{Name: infer.DmPrefix + "transformer_blocks.0.img_mod.1.weight", Dims: 2},
			{Name: infer.DmPrefix + "txt_norm.weight", Dims: 1},
			// 16 latent channels in 2×2 patches: MageFlow's 128 are another VAE's.
			{Name: infer.DmPrefix + "img_in.weight", Dim: 1, Value: 64},
		}},
		Encoders:    []infer.TextEncoder{{Component: "llm", Kind: "llm", Prefix: llm.LLMPrefix, Hidden: true}},
		Conditioner: "qwen_image", Network: "qwen_image", Schedule: "discrete-flow",
		Prediction: infer.FlowPrediction, VAE: infer.VAEFacts{Kind: "wan", Scale: 1}, FlowShift: 3,
		Defaults: infer.Defaults{Method: infer.Euler, Scheduler: infer.SchedulerDiscrete, CFGScale: 2.5, Width: 512, Height: 512, Steps: 20},
		// sd-cli's Qwen-Image Edit gives the references to the LLM too
		// (its "qwen" preset, pass_to_vlm), through a vision tower.
		RefsNeed: "Qwen-Image Edit also reads them with Qwen2.5-VL's vision tower (visual.*), which sdtool does not run",
	},
}

func init() { infer.Families = append(infer.Families, QwenImageFamilies...) }

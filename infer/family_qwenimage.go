package infer

// The Qwen-Image entry of the family table (base, 2512 and Edit share the
// DiT's layout; Edit's reference images are not taken).

// QwenImageFamilies is Qwen-Image: its MMDiT conditioned on Qwen2.5-VL's
// last hidden states, the flow schedule of SD3 with shift 3 (sd-cli's
// default --flow-shift for it), Euler, and Wan 2.1's VAE on one frame.
// The guidance scale is the one sd.cpp's documentation runs it with
// (sd-cli's own default, 7, oversaturates it).
var QwenImageFamilies = []*Family{
	{
		ID: "qwen_image", Title: "Qwen-Image",
		Match: [][]Marker{{
			{Name: dmPrefix + "transformer_blocks.0.img_mod.1.weight", Dims: 2},
			{Name: dmPrefix + "txt_norm.weight", Dims: 1},
			// 16 latent channels in 2×2 patches: MageFlow's 128 are another VAE's.
			{Name: dmPrefix + "img_in.weight", Dim: 1, Value: 64},
		}},
		Encoders:    []TextEncoder{{Component: "llm", Kind: "llm", Prefix: LLMPrefix, Hidden: true}},
		Conditioner: "qwen_image", Network: "qwen_image", Schedule: "discrete-flow",
		Prediction: FlowPrediction, VAE: VAEFacts{Kind: "wan", Scale: 1}, FlowShift: 3,
		Defaults: Defaults{Method: Euler, Scheduler: SchedulerDiscrete, CFGScale: 2.5, Width: 512, Height: 512, Steps: 20},
	},
}

func init() { Families = append(Families, QwenImageFamilies...) }

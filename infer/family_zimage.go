package infer

// The Z-Image entry of the family table (Turbo and Base share the tensors;
// the defaults are Turbo's, the release people run most).

// ZImageFamily is Z-Image: a single-stream DiT conditioned on the hidden
// states of a Qwen3 decoder (the --llm file) through its prompt template,
// with Flux's 16-channel VAE, sampled with Euler on sd-cli's discrete flow
// schedule (shift 3). Turbo runs without a negative pass (--cfg-scale 1) in
// 8 steps; Base wants --cfg-scale 5 and more steps.
var ZImageFamily = &Family{
	ID: "z_image", Title: "Z-Image",
	Match: [][]Marker{{
		{Name: dmPrefix + "layers.0.attention.qkv.weight", Dims: 2},
		{Name: dmPrefix + "cap_embedder.1.weight", Dims: 2},
	}},
	Encoders:    []TextEncoder{{Component: "llm", Kind: "llm", Prefix: LLMPrefix, Hidden: true}},
	Conditioner: "zimage", Network: "zimage", Schedule: "zimage",
	Prediction: FlowPrediction, VAE: fluxVAE, FlowShift: 3,
	Defaults: Defaults{Method: Euler, Scheduler: SchedulerDiscrete, CFGScale: 1, Width: 512, Height: 512, Steps: 8},
}

func init() { Families = append(Families, ZImageFamily) }

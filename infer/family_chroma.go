package infer

// The Chroma entry of the family table: Flux.1's DiT without CLIP and
// without per-block modulation layers (the approximator makes them),
// conditioned on T5-XXL alone with a padding mask, run with classifier-free
// guidance.

// chromaEncoders is Chroma's one text encoder: T5-XXL over 512 tokens, as
// sd-cli pads it for Chroma (optional, as sd-cli allows).
var chromaEncoders = []TextEncoder{
	{Component: "t5xxl", Kind: "t5", Prefix: fluxT5Prefix, Tokens: 512, Hidden: true, Optional: true},
}

// ChromaFamilies is Chroma: Flux's VAE and "flux" schedule with sd-cli's
// flow shift for a DiT without guidance_in (1), and the CFG scale Chroma's
// model card and sd.cpp's docs/chroma.md use (4; sd-cli's own default is 7).
var ChromaFamilies = []*Family{
	{
		ID: "chroma", Title: "Chroma",
		Match: [][]Marker{{
			fluxMarker,
			{Name: dmPrefix + "img_in.weight", Dims: 2}, // Chroma Radiance has pixel-space embedders instead
			{Name: chromaApproxPrefix + "in_proj.weight", Dims: 2},
			{Name: dmPrefix + "guidance_in.in_layer.weight", Absent: true},
		}},
		Encoders:    chromaEncoders,
		Conditioner: "chroma", Network: "chroma", Schedule: "flux",
		Prediction: FlowPrediction, VAE: fluxVAE, FlowShift: 1,
		Defaults: Defaults{Method: Euler, Scheduler: SchedulerFlux, CFGScale: 4, Width: 512, Height: 512, Steps: 20},
	},
}

func init() { Families = append(Families, ChromaFamilies...) }

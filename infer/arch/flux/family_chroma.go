package flux

import "github.com/sdtool/sdtool/infer"

// The Chroma entry of the family table: Flux.1's DiT without CLIP and
// without per-block modulation layers (the approximator makes them),
// conditioned on T5-XXL alone with a padding mask, run with classifier-free
// guidance.

// chromaEncoders is Chroma's one text encoder: T5-XXL over 512 tokens, as
// sd-cli pads it for Chroma (optional, as sd-cli allows).
var chromaEncoders = []infer.TextEncoder{
	{Component: "t5xxl", Kind: "t5", Prefix: FluxT5Prefix, Tokens: 512, Hidden: true, Optional: true},
}

// ChromaFamilies is Chroma: Flux's VAE and "flux" schedule with sd-cli's
// flow shift for a DiT without guidance_in (1), and the CFG scale Chroma's
// model card and sd.cpp's docs/chroma.md use (4; sd-cli's own default is 7).
var ChromaFamilies = []*infer.Family{
	{
		ID: "chroma", Title: "Chroma",
		Match: [][]infer.Marker{{
			fluxMarker,
			{Name: infer.DmPrefix + "img_in.weight", Dims: 2}, // Chroma Radiance has pixel-space embedders instead
			{Name: chromaApproxPrefix + "in_proj.weight", Dims: 2},
			{Name: infer.DmPrefix + "guidance_in.in_layer.weight", Absent: true},
		}},
		Encoders:    chromaEncoders,
		Conditioner: "chroma", Network: "chroma", Schedule: "flux",
		Prediction: infer.FlowPrediction, VAE: FluxVAE, FlowShift: 1,
		Defaults: infer.Defaults{Method: infer.Euler, Scheduler: SchedulerFlux, CFGScale: 4, Width: 512, Height: 512, Steps: 20},
	},
}

func init() { infer.Families = append(infer.Families, ChromaFamilies...) }

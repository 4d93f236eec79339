package flux

import "github.com/sdtool/sdtool/infer"

// The Flux.1 entries of the family table (kept in their own file so that the
// table's other rows and its detection can move without touching them).

// Internal-name prefixes of Flux's text encoders (sd-cli's).
const (
	fluxCLIPPrefix = "text_encoders.clip_l.transformer.text_model."
	FluxT5Prefix   = "text_encoders.t5xxl.transformer."
)

// fluxEncoders are Flux's text encoders: CLIP-L for its pooled output alone
// (the final norm's end-of-text token, unprojected) and T5-XXL for the
// 256 tokens of context; either may be absent, as sd-cli allows.
var fluxEncoders = []infer.TextEncoder{
	{Component: "clip_l", Kind: "clip", Prefix: fluxCLIPPrefix, Skip: 1, PadEOS: true, Pooled: true, NoProjection: true, Optional: true},
	{Component: "t5xxl", Kind: "t5", Prefix: FluxT5Prefix, Tokens: 256, Hidden: true, Optional: true},
}

// FluxVAE is the 16-channel Flux autoencoder's latent format (sd.cpp's).
var FluxVAE = infer.VAEFacts{Kind: "kl", Scale: 0.3611, Shift: 0.1159}

// fluxMarker is the tensor every Flux.1 DiT has.
var fluxMarker = infer.Marker{Name: infer.DmPrefix + "double_blocks.0.img_attn.qkv.weight", Dims: 2}

// FluxFamilies are Flux.1 dev (with a guidance embedding) and schnell
// (without one); both condition on CLIP-L's pooled output and T5-XXL,
// sample flow sigmas with Euler on sd-cli's "flux" schedule, and need no
// negative pass (--cfg-scale 1).
var FluxFamilies = []*infer.Family{
	{
		ID: "flux", Variant: "dev", Title: "Flux.1 dev",
		Match: [][]infer.Marker{{
			fluxMarker,
			{Name: infer.DmPrefix + "guidance_in.in_layer.weight"},
			{Name: infer.DmPrefix + "distilled_guidance_layer.in_proj.weight", Absent: true},
		}},
		Encoders: fluxEncoders, Vector: []infer.VectorPart{{Kind: "pooled"}},
		Conditioner: "flux", Network: "flux", Schedule: "flux",
		Prediction: infer.FlowPrediction, VAE: FluxVAE, FlowShift: 1.15,
		Defaults: infer.Defaults{Method: infer.Euler, Scheduler: SchedulerFlux, CFGScale: 1, Guidance: 3.5, Width: 512, Height: 512, Steps: 20},
	},
	{
		ID: "flux", Variant: "schnell", Title: "Flux.1 schnell",
		Match: [][]infer.Marker{{
			fluxMarker,
			{Name: infer.DmPrefix + "guidance_in.in_layer.weight", Absent: true},
			{Name: infer.DmPrefix + "distilled_guidance_layer.in_proj.weight", Absent: true},
		}},
		Encoders: fluxEncoders, Vector: []infer.VectorPart{{Kind: "pooled"}},
		Conditioner: "flux", Network: "flux", Schedule: "flux",
		Prediction: infer.FlowPrediction, VAE: FluxVAE, FlowShift: 1,
		Defaults: infer.Defaults{Method: infer.Euler, Scheduler: SchedulerFlux, CFGScale: 1, Width: 512, Height: 512, Steps: 20},
	},
}

func init() { infer.Families = append(infer.Families, FluxFamilies...) }

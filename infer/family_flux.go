package infer

// The Flux.1 entries of the family table (kept in their own file so that the
// table's other rows and its detection can move without touching them).

// Internal-name prefixes of Flux's text encoders (sd-cli's).
const (
	fluxCLIPPrefix = "text_encoders.clip_l.transformer.text_model."
	fluxT5Prefix   = "text_encoders.t5xxl.transformer."
)

// fluxEncoders are Flux's text encoders: CLIP-L for its pooled output alone
// (the final norm's end-of-text token, unprojected) and T5-XXL for the
// 256 tokens of context; either may be absent, as sd-cli allows.
var fluxEncoders = []TextEncoder{
	{Component: "clip_l", Kind: "clip", Prefix: fluxCLIPPrefix, Skip: 1, PadEOS: true, Pooled: true, NoProjection: true, Optional: true},
	{Component: "t5xxl", Kind: "t5", Prefix: fluxT5Prefix, Tokens: 256, Hidden: true, Optional: true},
}

// fluxVAE is the 16-channel Flux autoencoder's latent format (sd.cpp's).
var fluxVAE = VAEFacts{Kind: "kl", Scale: 0.3611, Shift: 0.1159}

// fluxMarker is the tensor every Flux.1 DiT has.
var fluxMarker = Marker{Name: dmPrefix + "double_blocks.0.img_attn.qkv.weight", Dims: 2}

// FluxFamilies are Flux.1 dev (with a guidance embedding) and schnell
// (without one); both condition on CLIP-L's pooled output and T5-XXL,
// sample flow sigmas with Euler on sd-cli's "flux" schedule, and need no
// negative pass (--cfg-scale 1).
var FluxFamilies = []*Family{
	{
		ID: "flux", Variant: "dev", Title: "Flux.1 dev",
		Match: [][]Marker{{
			fluxMarker,
			{Name: dmPrefix + "guidance_in.in_layer.weight"},
			{Name: dmPrefix + "distilled_guidance_layer.in_proj.weight", Absent: true},
		}},
		Encoders: fluxEncoders, Vector: []VectorPart{{Kind: "pooled"}},
		Conditioner: "flux", Network: "flux", Schedule: "flux",
		Prediction: FlowPrediction, VAE: fluxVAE, FlowShift: 1.15,
		Defaults: Defaults{Method: Euler, Scheduler: SchedulerFlux, CFGScale: 1, Guidance: 3.5, Width: 512, Height: 512, Steps: 20},
	},
	{
		ID: "flux", Variant: "schnell", Title: "Flux.1 schnell",
		Match: [][]Marker{{
			fluxMarker,
			{Name: dmPrefix + "guidance_in.in_layer.weight", Absent: true},
			{Name: dmPrefix + "distilled_guidance_layer.in_proj.weight", Absent: true},
		}},
		Encoders: fluxEncoders, Vector: []VectorPart{{Kind: "pooled"}},
		Conditioner: "flux", Network: "flux", Schedule: "flux",
		Prediction: FlowPrediction, VAE: fluxVAE, FlowShift: 1,
		Defaults: Defaults{Method: Euler, Scheduler: SchedulerFlux, CFGScale: 1, Width: 512, Height: 512, Steps: 20},
	},
}

func init() { Families = append(Families, FluxFamilies...) }

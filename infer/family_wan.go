package infer

// The Wan 2.1/2.2 entries of the family table: text-to-video DiTs
// conditioned on UMT5-XXL, sampled with Euler on sd-cli's discrete flow
// schedule (shift 5), decoded by the Wan VAE.

// wanEncoders is Wan's text encoder: UMT5-XXL, 512 tokens, optional as sd-cli allows.
var wanEncoders = []TextEncoder{
	{Component: "t5xxl", Kind: "t5", Prefix: T5Prefix, Tokens: wanTextTokens, Hidden: true, Optional: true},
}

// wanVAE is the latent format Wan's entries decode: Wan's causal 3-D VAE
// (the kind maps latents per channel itself), four frames per latent frame.
var wanVAE = VAEFacts{Kind: "wan", Scale: 1, TimeFactor: 4}

// wanDefaults are sd-cli's defaults for a video (its vid_gen mode).
var wanDefaults = Defaults{Method: Euler, Scheduler: SchedulerDiscrete, CFGScale: 7, Width: 512, Height: 512, Steps: 20, Frames: 6, FPS: 16}

// wanMarker is the 3-D patch embedding every Wan DiT has.
var wanMarker = Marker{Name: dmPrefix + "patch_embedding.weight"}

// WanFamilies are Wan 2.1 text-to-video (1.3B, 14B, and the 14B-shaped
// experts of Wan 2.2 A14B) and Wan 2.2 TI2V-5B (48 latent channels).
var WanFamilies = []*Family{
	{
		ID: "wan", Title: "Wan 2.1 / 2.2",
		Match:    [][]Marker{{wanMarker, {Name: dmPrefix + "blocks.0.cross_attn.k_img.weight", Absent: true}}},
		Encoders: wanEncoders, Conditioner: "wan", Network: "wan", Schedule: "discrete-flow",
		Prediction: FlowPrediction, VAE: wanVAE, FlowShift: 5, Defaults: wanDefaults,
	},
}

func init() { Families = append(Families, WanFamilies...) }

package wan

import (
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/t5"
)

// The Wan 2.1/2.2 entries of the family table: text-to-video DiTs
// conditioned on UMT5-XXL, sampled with Euler on sd-cli's discrete flow
// schedule (shift 5), decoded by the Wan VAE.

// wanEncoders is Wan's text encoder: UMT5-XXL, 512 tokens, optional as sd-cli allows.
var wanEncoders = []infer.TextEncoder{
	{Component: "t5xxl", Kind: "t5", Prefix: t5.T5Prefix, Tokens: wanTextTokens, Hidden: true, Optional: true},
}

// wanVAE is Wan 2.1's VAE (16 channels, 8 pixels per cell, a latent frame
// per 4 frames after the first); the kind normalises the latents with its
// per-channel mean and std, so the family's scale is 1.
var wanVAE = infer.VAEFacts{Kind: "wan", Scale: 1, TimeFactor: 4}

// wan22VAE is Wan 2.2's VAE (48 channels, 16 pixels per cell), TI2V-5B's.
var wan22VAE = infer.VAEFacts{Kind: "wan", Scale: 1, Down: 16, TimeFactor: 4}

// wan22VAEMarker is a tensor only Wan 2.2's VAE has (its residual levels).
var wan22VAEMarker = infer.Marker{Name: infer.VAEPfx + "decoder.upsamples.0.upsamples.0.residual.0.gamma"}

// wanDefaults are sd-cli's defaults for a video (its vid_gen mode).
var wanDefaults = infer.Defaults{Method: infer.Euler, Scheduler: infer.SchedulerDiscrete, CFGScale: 7, Width: 512, Height: 512, Steps: 20, Frames: 6, FPS: 16}

// wanMarker is the 3-D patch embedding every Wan DiT has.
var wanMarker = infer.Marker{Name: infer.DmPrefix + "patch_embedding.weight"}

// WanFamilies are Wan 2.2 TI2V-5B (48 latent channels and Wan 2.2's VAE,
// told by that VAE) and Wan 2.1 text-to-video (1.3B, 14B, and the
// 14B-shaped experts of Wan 2.2 A14B).
var WanFamilies = []*infer.Family{
	{
		ID: "wan", Variant: "ti2v-5b", Title: "Wan 2.2 TI2V-5B",
		Match:    [][]infer.Marker{{wanMarker, wan22VAEMarker}},
		Encoders: wanEncoders, Conditioner: "wan", Network: "wan", Schedule: "discrete-flow",
		Prediction: infer.FlowPrediction, VAE: wan22VAE, FlowShift: 5, Defaults: wanDefaults,
		InitFirstFrame: true, // sd-cli's image-to-video for TI2V-5B
	},
	{
		ID: "wan", Title: "Wan 2.1",
		Match:    [][]infer.Marker{{wanMarker}}, // the I2V DiTs too, which the network refuses by name (refuseWanI2V)
		Encoders: wanEncoders, Conditioner: "wan", Network: "wan", Schedule: "discrete-flow",
		Prediction: infer.FlowPrediction, VAE: wanVAE, FlowShift: 5, Defaults: wanDefaults,
	},
}

func init() { infer.Families = append(infer.Families, WanFamilies...) }

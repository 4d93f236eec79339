package sd3

import (
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
)

// The SD 3 / 3.5 entry of the family table: the MMDiT conditioned on
// CLIP-L, CLIP-G and T5-XXL (each optional, as sd-cli allows), the
// 16-channel SD3 VAE, sampled on sd-cli's discrete flow schedule.

// Internal-name prefixes of SD3's text encoders (sd-cli's).
const (
	sd3CLIPLPrefix = "text_encoders.clip_l.transformer.text_model."
	sd3CLIPGPrefix = "text_encoders.clip_g.transformer.text_model."
)

// sd3Encoders are SD3's text encoders: both CLIPs at their penultimate
// layer without the final norm (sd-cli's clip-skip 2), CLIP-G padding
// with 0 and pooled through its projection, CLIP-L pooled without one
// (sd.cpp gives OpenAI's CLIP-L no text_projection, even where the file
// has one); T5-XXL over chunks of 77.
var sd3Encoders = []infer.TextEncoder{
	{Component: "clip_l", Kind: "clip", Prefix: sd3CLIPLPrefix, Skip: 2, PadEOS: true, Hidden: true, Pooled: true, NoProjection: true, Optional: true},
	{Component: "clip_g", Kind: "clip", Prefix: sd3CLIPGPrefix, Skip: 2, GELU: true, Hidden: true, Pooled: true, Optional: true},
	{Component: "t5xxl", Kind: "t5", Prefix: flux.FluxT5Prefix, Tokens: sd3Chunk, Hidden: true, Optional: true},
}

// SD3Families is SD 3 medium and 3.5 medium and large (one entry: the
// network reads the layout from the shapes). The flow shift is sd-cli's
// default for SD3 (3); the CFG scale is the one sd.cpp's docs/sd3.md uses
// for 3.5 (4.5; sd-cli's own default is 7).
var SD3Families = []*infer.Family{
	{
		ID: "sd3", Title: "SD 3 / 3.5",
		Match: [][]infer.Marker{{
			{Name: infer.DmPrefix + "x_embedder.proj.weight", Dims: 4},
			{Name: infer.DmPrefix + "joint_blocks.0.x_block.attn.qkv.weight", Dims: 2},
		}},
		Encoders:    sd3Encoders,
		Conditioner: "sd3", Network: "mmdit", Schedule: "discrete-flow",
		Prediction: infer.FlowPrediction, VAE: infer.VAEFacts{Kind: "kl", Scale: 1.5305, Shift: 0.0609}, FlowShift: 3,
		Defaults: infer.Defaults{Method: infer.Euler, Scheduler: infer.SchedulerDiscrete, CFGScale: 4.5, Width: 512, Height: 512, Steps: 20},
	},
}

func init() { infer.Families = append(infer.Families, SD3Families...) }

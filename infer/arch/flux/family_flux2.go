package flux

import (
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/llm"
)

// The Flux.2 entries of the family table.

// flux2VAE is Flux.2's autoencoder and latent format: 32 channels whose
// 2×2 patches are normalized by fixed statistics (VAE kind "flux2"), no
// further scale or shift.
var flux2VAE = infer.VAEFacts{Kind: "flux2", Scale: 1}

// Flux2Families are Flux.2 klein (4B and 9B, distilled and base: the same
// tensors) conditioned on Qwen3 through KleinPrompt, and Flux.2 dev (a
// guidance embedding, 48 single blocks: sd.cpp tells dev by
// single_blocks.47) conditioned on Mistral Small 3.x through DevPrompt,
// both sampled with Euler on sd-cli's "flux2" schedule. Klein's defaults
// are the distilled release's (no negative pass, 4 steps; base wants
// --cfg-scale 4 and about 20 steps); dev's are sd-cli's (20 steps,
// guidance 3.5, no negative pass). Both take reference images (sd-cli's
// -r) as latents after the image tokens; their text encoders do not see
// them (sd.cpp's "flux2" preset).
var Flux2Families = []*infer.Family{
	{
		ID: "flux2", Variant: "klein", Title: "Flux.2 klein",
		Match: [][]infer.Marker{{
			{Name: infer.DmPrefix + "double_stream_modulation_img.lin.weight", Dims: 2},
			{Name: infer.DmPrefix + "single_blocks.47.linear1.weight", Absent: true},
		}},
		Encoders:    []infer.TextEncoder{{Component: "llm", Kind: "llm", Prefix: llm.LLMPrefix, Hidden: true}},
		Conditioner: "flux2", Network: "flux2", Schedule: "flux2",
		Prediction: infer.FlowPrediction, VAE: flux2VAE, FlowShift: 1,
		Defaults:   infer.Defaults{Method: infer.Euler, Scheduler: SchedulerFlux2, CFGScale: 1, Width: 512, Height: 512, Steps: 4},
		RefLatents: true,
	},
	{
		ID: "flux2", Variant: "dev", Title: "Flux.2 dev",
		Match: [][]infer.Marker{{
			{Name: infer.DmPrefix + "double_stream_modulation_img.lin.weight", Dims: 2},
			{Name: infer.DmPrefix + "single_blocks.47.linear1.weight", Dims: 2},
		}},
		Encoders:    []infer.TextEncoder{{Component: "llm", Kind: "llm", Prefix: llm.LLMPrefix, Hidden: true}},
		Conditioner: "flux2_dev", Network: "flux2", Schedule: "flux2",
		Prediction: infer.FlowPrediction, VAE: flux2VAE, FlowShift: 1,
		Defaults:   infer.Defaults{Method: infer.Euler, Scheduler: SchedulerFlux2, CFGScale: 1, Guidance: 3.5, Width: 512, Height: 512, Steps: 20},
		RefLatents: true,
	},
}

func init() { infer.Families = append(infer.Families, Flux2Families...) }

package zimage

import (
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/infer/encoder/llm"
)

// The Z-Image entry of the family table (Turbo and Base share the tensors;
// the defaults are Turbo's, the release people run most).

// ZImageFamily is Z-Image: a single-stream DiT conditioned on the hidden
// states of a Qwen3 decoder (the --llm file) through its prompt template,
// with Flux's 16-channel VAE, sampled with Euler on sd-cli's discrete flow
// schedule (shift 3). Turbo runs without a negative pass (--cfg-scale 1) in
// 8 steps; Base wants --cfg-scale 5 and more steps.
var ZImageFamily = &infer.Family{
	ID: "z_image", Title: "Z-Image",
	Match: [][]infer.Marker{{
		{Name: infer.DmPrefix + "layers.0.attention.qkv.weight", Dims: 2},
		{Name: infer.DmPrefix + "cap_embedder.1.weight", Dims: 2},
	}},
	Encoders:    []infer.TextEncoder{{Component: "llm", Kind: "llm", Prefix: llm.LLMPrefix, Hidden: true}},
	Conditioner: "zimage", Network: "zimage", Schedule: "zimage",
	Prediction: infer.FlowPrediction, VAE: flux.FluxVAE, FlowShift: 3,
	Defaults: infer.Defaults{Method: infer.Euler, Scheduler: infer.SchedulerDiscrete, CFGScale: 1, Width: 512, Height: 512, Steps: 8},
}

func init() { infer.Families = append(infer.Families, ZImageFamily) }

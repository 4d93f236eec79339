package sd

import "github.com/sdtool/sdtool/infer"

// The Stable Diffusion entries of the family table (SD 1.x, 2.x, XL).

// Internal-name prefixes (sd.cpp's) of the SD families' text encoders.
const (
	CLIPPrefix  = "cond_stage_model.transformer.text_model."
	clipGPrefix = "cond_stage_model.1.transformer.text_model."
)

// sdDefaults are sd-cli's defaults for the UNet families.
var sdDefaults = infer.Defaults{Method: infer.EulerAncestral, Scheduler: infer.SchedulerDiscrete, CFGScale: 7, Width: 512, Height: 512, Steps: 20}

// sdFamilies are SD 1.x, SD 2.x, SDXL and the SDXL refiner: the LDM UNet
// conditioned on CLIP text encoders, with the KL VAE, sampled on the
// discrete schedule.
var sdFamilies = []*infer.Family{
	{
		ID: "sdxl", Title: "SDXL",
		Match: [][]infer.Marker{{
			{Name: infer.DmPrefix + "label_emb.0.0.weight", Dims: 2},
			{Name: CLIPPrefix + "embeddings.token_embedding.weight"},
			{Name: clipGPrefix + "embeddings.token_embedding.weight"},
		}},
		Encoders: []infer.TextEncoder{
			{Component: "clip_l", Kind: "clip", Prefix: CLIPPrefix, Skip: 2, PadEOS: true, Hidden: true},
			{Component: "clip_g", Kind: "clip", Prefix: clipGPrefix, Skip: 2, GELU: true, Hidden: true, Pooled: true},
		},
		Vector:      []infer.VectorPart{{Kind: "pooled"}, {Kind: "size", Dim: 256}, {Kind: "crop", Dim: 256}, {Kind: "target", Dim: 256}},
		Conditioner: "clip", Network: "unet", Schedule: "discrete",
		Prediction: infer.EpsPrediction, EmptyNegativeZero: true,
		VAE:      infer.VAEFacts{Kind: "kl", Scale: 0.13025, BuiltinConvScale: 1.0 / 32},
		Defaults: sdDefaults,
	},
	{
		// The SDXL refiner: OpenCLIP bigG alone (its single file names it
		// conditioner.embedders.0), context 1280 wide, and a 2560-wide
		// vector with sgm's aesthetic score in place of the target size
		// (6 for the prompt, 2.5 for the negative, sgm's defaults).
		// stable-diffusion.cpp does not run it (its detection finds no
		// version for it).
		ID: "sdxl", Variant: "refiner", Title: "SDXL refiner",
		Match: [][]infer.Marker{{
			{Name: infer.DmPrefix + "label_emb.0.0.weight", Dims: 2},
			{Name: CLIPPrefix + "embeddings.token_embedding.weight"},
			{Name: clipGPrefix + "embeddings.token_embedding.weight", Absent: true},
		}},
		Encoders: []infer.TextEncoder{
			{Component: "clip_g", Kind: "clip", Prefix: CLIPPrefix, Skip: 2, GELU: true, Hidden: true, Pooled: true},
		},
		Vector:      []infer.VectorPart{{Kind: "pooled"}, {Kind: "size", Dim: 256}, {Kind: "crop", Dim: 256}, {Kind: "score", Dim: 256, Value: 6, Negative: 2.5}},
		Conditioner: "clip", Network: "unet", Schedule: "discrete",
		Prediction: infer.EpsPrediction,
		VAE:        infer.VAEFacts{Kind: "kl", Scale: 0.13025, BuiltinConvScale: 1.0 / 32},
		Defaults:   sdDefaults,
	},
	{
		ID: "sd2", Title: "SD 2.x",
		Match: [][]infer.Marker{
			{{Name: infer.DmPrefix + "input_blocks.0.0.weight"}, {Name: infer.DmPrefix + "middle_block.1.proj_in.weight", Dims: 2}},
			{{Name: infer.DmPrefix + "input_blocks.0.0.weight"}, {Name: CLIPPrefix + "embeddings.token_embedding.weight", Dim: 1, Value: 1024}},
		},
		Encoders:    []infer.TextEncoder{{Component: "clip_l", Kind: "clip", Prefix: CLIPPrefix, Skip: 2, FinalNorm: true, GELU: true, Hidden: true}},
		Conditioner: "clip", Network: "unet", Schedule: "discrete",
		Prediction: infer.EpsPrediction, ProbePrediction: true,
		VAE:      infer.VAEFacts{Kind: "kl", Scale: 0.18215},
		Defaults: sdDefaults,
	},
	{
		ID: "sd1", Title: "SD 1.x",
		Match:       [][]infer.Marker{{{Name: infer.DmPrefix + "input_blocks.0.0.weight"}, {Name: CLIPPrefix + "embeddings.token_embedding.weight"}}},
		Encoders:    []infer.TextEncoder{{Component: "clip_l", Kind: "clip", Prefix: CLIPPrefix, Skip: 1, FinalNorm: true, PadEOS: true, Hidden: true}},
		Conditioner: "clip", Network: "unet", Schedule: "discrete",
		Prediction: infer.EpsPrediction,
		VAE:        infer.VAEFacts{Kind: "kl", Scale: 0.18215},
		Defaults:   sdDefaults,
	},
}

func init() { infer.Families = append(infer.Families, sdFamilies...) }

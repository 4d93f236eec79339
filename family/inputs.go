package family

import (
	"slices"
	"strings"
)

// The input table (the model components a command reads, one file each): the model-file flags of sd-cli (and sdtool's
// generate and convert), what a file given to each provides, and the name
// prefixes each loader gives its tensors. generate's and convert's flags,
// infer's loader and convert's loader all read it, so a family that brings
// a new kind of file (an LLM text encoder, a second VAE) adds a row here
// and nowhere else.

// Input flags the code refers to by name: the whole model, which every
// other component's part replaces, and the VAE, which a standalone file of
// several parts may also provide.
const (
	FlagModel = "model"
	FlagVAE   = "vae"
)

// Input is one model-file flag: a row of the input table.
type Input struct {
	// Flag is the long flag without dashes ("model", "clip_l").
	Flag string
	// Alias is the one-letter flag, if any ("m").
	Alias string
	// What names the file the flag takes, for help texts ("CLIP-L text encoder").
	What string
	// Kind is the part's kind (KindDiffusion, KindTextEncoder, KindVAE),
	// "" for the whole model.
	Kind string
	// Primary components name the model: generate needs one of them, and
	// the first one given names the model in messages.
	Primary bool
	// Generate reports that generate takes the flag (sd-cli's generate
	// loader); convert takes every row.
	Generate bool
	// LoadPrefix is the prefix sd-cli's generate loader gives a standalone
	// file's tensor names ("clip_l."), before the name conversion.
	LoadPrefix string
	// LoadKeep lists name prefixes that already name the part and get no
	// LoadPrefix (a whole checkpoint given as --vae keeps first_stage_model.).
	LoadKeep []string
	// Parts are the internal (converted) name prefixes of the part the
	// component provides, which replace the same part of the whole model;
	// nil for the whole model.
	Parts []string
	// ConvertPrefix is the prefix `sd-cli -M convert` gives the file's names.
	ConvertPrefix string
	// ConvertOrder is the position in which sd-cli's convert loads the
	// file (its order decides which of two equal names wins and the
	// output's tensor order).
	ConvertOrder int
	// SDCpp reports that sd-cli has the flag (convert's --llm is sdtool's).
	SDCpp bool
}

// Inputs is the input table in generate's load order (sd-cli's).
var Inputs = []*Input{
	{Flag: FlagModel, Alias: "m", What: "whole model", Primary: true, Generate: true, SDCpp: true, ConvertOrder: 0},
	{Flag: "diffusion-model", What: "diffusion model (UNet or DiT)", Kind: KindDiffusion, Primary: true, Generate: true, SDCpp: true,
		LoadPrefix: "model.diffusion_model.", LoadKeep: []string{"model.diffusion_model.", "diffusion_model."},
		Parts: []string{"model.diffusion_model."}, ConvertPrefix: "model.diffusion_model.", ConvertOrder: 4},
	{Flag: "clip_l", What: "CLIP-L text encoder", Kind: KindTextEncoder, Generate: true, SDCpp: true,
		LoadPrefix: "clip_l.", Parts: []string{"cond_stage_model.transformer.", "cond_stage_model.model.", "text_encoders.clip_l."},
		ConvertPrefix: "text_encoders.clip_l.transformer.", ConvertOrder: 1},
	{Flag: "clip_g", What: "OpenCLIP bigG text encoder", Kind: KindTextEncoder, Generate: true, SDCpp: true,
		LoadPrefix: "clip_g.", Parts: []string{"cond_stage_model.1.", "text_encoders.clip_g."},
		ConvertPrefix: "text_encoders.clip_g.transformer.", ConvertOrder: 2},
	{Flag: "t5xxl", What: "T5-XXL text encoder", Kind: KindTextEncoder, Generate: true, SDCpp: true,
		LoadPrefix: "text_encoders.t5xxl.transformer.", Parts: []string{"text_encoders.t5xxl."},
		ConvertPrefix: "text_encoders.t5xxl.transformer.", ConvertOrder: 3},
	{Flag: FlagVAE, What: "VAE", Kind: KindVAE, Generate: true, SDCpp: true,
		LoadPrefix: "vae.", LoadKeep: []string{"first_stage_model.", "vae."},
		Parts: []string{"first_stage_model."}, ConvertPrefix: "vae.", ConvertOrder: 5},
	{Flag: "llm", What: "decoder-only LLM text encoder (Qwen3, Qwen2.5-VL)", Kind: KindTextEncoder, Generate: true,
		LoadPrefix: "text_encoders.llm.", Parts: []string{"text_encoders.llm."},
		ConvertPrefix: "text_encoders.llm.", ConvertOrder: 6},
}

// InputByFlag returns the row of flag, or nil.
func InputByFlag(flag string) *Input {
	for _, c := range Inputs {
		if c.Flag == flag {
			return c
		}
	}
	return nil
}

// GenerateInputs lists the rows generate takes, in its load order.
func GenerateInputs() []*Input {
	var out []*Input
	for _, c := range Inputs {
		if c.Generate {
			out = append(out, c)
		}
	}
	return out
}

// ConvertInputs lists every row in convert's load order.
func ConvertInputs() []*Input {
	out := slices.Clone(Inputs)
	slices.SortStableFunc(out, func(a, b *Input) int { return a.ConvertOrder - b.ConvertOrder })
	return out
}

// LoadName gives a tensor name of a standalone file of c its load prefix,
// as sd-cli's generate loader does.
func (c *Input) LoadName(name string) string {
	if c.LoadPrefix == "" || strings.HasPrefix(name, c.LoadPrefix) {
		return name
	}
	for _, k := range c.LoadKeep {
		if strings.HasPrefix(name, k) {
			return name
		}
	}
	return c.LoadPrefix + name
}

// Provides reports whether an internal name belongs to the part c provides.
func (c *Input) Provides(name string) bool {
	for _, p := range c.Parts {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Whole reports whether c is the whole model rather than one part of it.
func (c *Input) Whole() bool { return c.Parts == nil && c.Kind == "" }

package family

import (
	"slices"
	"testing"
)

// The input table is consistent: flags are unique, convert's load order is
// a permutation of the rows, every part has internal prefixes to replace
// and a load prefix when generate takes it, and some row names the model.
func TestInputTable(t *testing.T) {
	seen := map[string]bool{}
	orders := map[int]bool{}
	primary := 0
	for _, in := range Inputs {
		if seen[in.Flag] {
			t.Errorf("flag %q twice", in.Flag)
		}
		seen[in.Flag] = true
		if orders[in.ConvertOrder] || in.ConvertOrder < 0 || in.ConvertOrder >= len(Inputs) {
			t.Errorf("%s: convert order %d repeated or out of range", in.Flag, in.ConvertOrder)
		}
		orders[in.ConvertOrder] = true
		if in.Primary {
			primary++
		}
		if in.What == "" {
			t.Errorf("%s: no description", in.Flag)
		}
		if in.Whole() {
			if in.LoadPrefix != "" || in.ConvertPrefix != "" {
				t.Errorf("%s: the whole model keeps its names, yet has a prefix", in.Flag)
			}
			continue
		}
		if in.ConvertPrefix == "" {
			t.Errorf("%s: a part without a convert prefix", in.Flag)
		}
		if in.Generate && (in.LoadPrefix == "" || len(in.Parts) == 0) {
			t.Errorf("%s: generate takes it but it has no load prefix or parts", in.Flag)
		}
	}
	if primary == 0 || !InputByFlag(FlagModel).Whole() || InputByFlag(FlagVAE) == nil {
		t.Errorf("the table lacks a primary row, the whole model or the VAE")
	}
	var flags []string
	for _, in := range ConvertInputs() {
		flags = append(flags, in.Flag)
	}
	// sd-cli's convert loads -m, then the text encoders, the diffusion
	// model and the VAE (stable-diffusion.cpp's convert()); sdtool's own
	// rows (the LLM, Wan 2.2 A14B's high-noise expert) come after.
	want := []string{"model", "clip_l", "clip_g", "t5xxl", "diffusion-model", "vae", "llm", "high-noise-diffusion-model"}
	if !slices.Equal(flags, want) {
		t.Errorf("ConvertInputs order %q, want %q", flags, want)
	}
}

// A standalone file's names get the load prefix unless they already name
// the part, and Provides matches the internal names of the part only.
func TestInputNames(t *testing.T) {
	vae, clipG := InputByFlag(FlagVAE), InputByFlag("clip_g")
	for _, c := range []struct {
		in         *Input
		name, want string
	}{
		{vae, "decoder.conv_in.weight", "vae.decoder.conv_in.weight"},
		{vae, "first_stage_model.decoder.conv_in.weight", "first_stage_model.decoder.conv_in.weight"},
		{vae, "vae.decoder.conv_in.weight", "vae.decoder.conv_in.weight"},
		{clipG, "text_model.final_layer_norm.weight", "clip_g.text_model.final_layer_norm.weight"},
		{InputByFlag(FlagModel), "model.diffusion_model.out.2.weight", "model.diffusion_model.out.2.weight"},
	} {
		if got := c.in.LoadName(c.name); got != c.want {
			t.Errorf("%s.LoadName(%q) = %q, want %q", c.in.Flag, c.name, got, c.want)
		}
	}
	if !vae.Provides("first_stage_model.decoder.conv_in.weight") || vae.Provides("model.diffusion_model.out.2.weight") {
		t.Error("the VAE's Provides does not match its part alone")
	}
	if !clipG.Provides("cond_stage_model.1.transformer.text_model.final_layer_norm.weight") || clipG.Provides("cond_stage_model.transformer.text_model.final_layer_norm.weight") {
		t.Error("clip_g's Provides does not match its part alone")
	}
}

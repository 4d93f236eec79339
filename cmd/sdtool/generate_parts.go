package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// missingParts explains a -m file that holds a diffusion model alone (as
// Flux, SD3 and Wan are released): generate, like sd-cli, then needs the
// text encoders and VAE as files of their own. It names the family as
// inspect does and the flags of the parts not given, or returns nil when
// the file is something else (and the engine's own error stands).
func missingParts(comps infer.Components) error {
	whole := comps["model"]
	if whole == "" || comps["diffusion-model"] != "" {
		return nil
	}
	m, err := formats.Open(whole)
	if err != nil {
		return nil
	}
	defer m.Close()
	arch := family.Detect(m.Tensors(), m.Metadata())
	if len(arch.Components) != 1 || arch.Components[0].Kind != "diffusion" {
		return nil
	}
	var encoders []string
	for _, f := range infer.Families {
		if f.ID != arch.Name {
			continue
		}
		for _, e := range f.Encoders {
			if !slices.Contains(encoders, e.Component) {
				encoders = append(encoders, e.Component)
			}
		}
	}
	if len(encoders) == 0 {
		return nil // not a family generate runs: the engine says so
	}
	var missing []string
	for _, in := range family.GenerateInputs() {
		needed := in.Kind == family.KindVAE || slices.Contains(encoders, in.Flag)
		if needed && comps[in.Flag] == "" {
			missing = append(missing, "--"+in.Flag+" FILE")
		}
	}
	title := arch.Main().Title
	if v := arch.Variant(); v != "" {
		title += " " + v
	}
	return fmt.Errorf("%s is a %s diffusion model alone (no text encoders, no VAE): give it as --diffusion-model %s with %s",
		whole, title, whole, strings.Join(missing, " "))
}

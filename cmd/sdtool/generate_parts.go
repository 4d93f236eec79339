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
	whole := comps[family.FlagModel]
	if whole == "" || comps[flagDiffusion] != "" {
		return nil
	}
	title, needs, ok := aloneNeeds(whole)
	if !ok {
		return nil
	}
	return fmt.Errorf("%s is a %s diffusion model alone (no text encoders, no VAE): give it as --diffusion-model %s with %s",
		whole, title, whole, strings.Join(absentParts(needs, comps), " "))
}

// flagDiffusion is the input flag of a diffusion model given alone.
const flagDiffusion = "diffusion-model"

// aloneNeeds says what a file holding a diffusion model alone needs beside
// it: its family's title (as inspect names it) and the input rows of the
// text encoders and VAE that family runs with. ok is false when the file
// is something else, or of a family generate does not run.
func aloneNeeds(path string) (title string, needs []*family.Input, ok bool) {
	m, err := formats.Open(path)
	if err != nil {
		return "", nil, false
	}
	defer m.Close()
	arch := family.Detect(m.Tensors(), m.Metadata())
	if len(arch.Components) != 1 || arch.Components[0].Kind != family.KindDiffusion {
		return "", nil, false
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
		return "", nil, false // not a family generate runs: the engine says so
	}
	for _, in := range family.GenerateInputs() {
		if in.Kind == family.KindVAE || slices.Contains(encoders, in.Flag) {
			needs = append(needs, in)
		}
	}
	title = arch.Main().Title
	if v := arch.Variant(); v != "" {
		title += " " + v
	}
	return title, needs, true
}

// absentParts names, as "--FLAG FILE", the rows of needs that comps lacks.
func absentParts(needs []*family.Input, comps infer.Components) []string {
	var out []string
	for _, in := range needs {
		if comps[in.Flag] == "" {
			out = append(out, "--"+in.Flag+" FILE")
		}
	}
	return out
}

package main

import (
	"fmt"
	"os"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/text"
)

// resolveTokenizer decides where generate's CLIP tokenizer comes from:
// --tokenizer when given; else "" when a component that carries CLIP (the
// whole model, the diffusion model or a text encoder) embeds one (infer reads it from the
// metadata); else the first one found where people keep one
// (text.FindCLIPTokenizer: beside the model, a diffusers folder's
// tokenizer/, a ComfyUI install, the Hugging Face cache), which it returns
// with what to tell the user. When none is found the error lists where it
// looked; the caller reports it when infer.Load then fails for want of a
// tokenizer (text.ErrNoTokenizer), so that the model's other problems are
// said first. A file that cannot be opened is left to infer.Load.
func resolveTokenizer(flag string, comps infer.Components) (path, said string, err error) {
	if flag != "" {
		return flag, "", nil
	}
	// Every component but the VAE may carry CLIP's tokenizer; the first in
	// load order (-m, else --diffusion-model) is where to look beside.
	var files []string
	for _, in := range family.GenerateInputs() {
		if f := comps[in.Flag]; f != "" && in.Kind != family.KindVAE {
			files = append(files, f)
		}
	}

	for _, f := range files {
		m, err := formats.Open(f)
		if err != nil {
			return "", "", nil
		}
		_, embedded := m.Metadata().Get(text.CLIPMergesKey)
		m.Close()
		if embedded {
			return "", "", nil
		}
	}
	if len(files) == 0 {
		return "", "", nil
	}
	model := files[0]
	_, p, err := text.FindCLIPTokenizer(model, os.Getenv)
	if err != nil {
		return "", "", fmt.Errorf("%s: no tokenizer in the model's metadata (%s) and %v; pass --tokenizer with CLIP's tokenizer.json, vocab.json and merges.txt, or their folder (or embed one with `sdtool convert --tokenizer`)",
			model, text.CLIPMergesKey, err)
	}
	return p.Path, fmt.Sprintf("tokenizer: %s (%s)", p.Path, p.Where), nil
}

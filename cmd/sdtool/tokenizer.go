package main

import (
	"fmt"
	"os"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer/text"
)

// resolveTokenizer decides where generate's CLIP tokenizer comes from:
// --tokenizer when given; else "" when the model embeds one (infer reads
// it from the metadata); else the first one found where people keep one
// (text.FindCLIPTokenizer: beside the model, a diffusers folder's
// tokenizer/, a ComfyUI install, the Hugging Face cache), which it returns
// with what to tell the user. When none is found the error lists where it
// looked; the caller reports it when infer.Load then fails for want of a
// tokenizer (text.ErrNoTokenizer), so that the model's other problems are
// said first. A model that cannot be opened is left to infer.Load.
func resolveTokenizer(flag, model string) (path, said string, err error) {
	if flag != "" {
		return flag, "", nil
	}
	m, err := formats.Open(model)
	if err != nil {
		return "", "", nil
	}
	_, embedded := m.Metadata().Get(text.CLIPMergesKey)
	m.Close()
	if embedded {
		return "", "", nil
	}
	_, p, err := text.FindCLIPTokenizer(model, os.Getenv)
	if err != nil {
		return "", "", fmt.Errorf("%s: no tokenizer in the model's metadata (%s) and %v; pass --tokenizer with CLIP's tokenizer.json, vocab.json and merges.txt, or their folder (or embed one with `sdtool convert --tokenizer`)",
			model, text.CLIPMergesKey, err)
	}
	return p.Path, fmt.Sprintf("tokenizer: %s (%s)", p.Path, p.Where), nil
}

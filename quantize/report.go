package quantize

import (
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
)

// notes returns what the plan's summary says after the totals: the type
// and format, the architecture, the consumers that can load the output,
// and the imatrix coverage.
func notes(r *Report) []string {
	what := r.Type
	if r.Format == "gguf" {
		what = r.FType.Name
	}
	out := []string{fmt.Sprintf("type: %s (%s)", what, r.Format)}
	if r.Format == "gguf" && !r.FType.Plain && r.Type != r.FType.Name {
		// A spelling other than the mix's own: say which mix it means, and
		// that a ggml name spelt the same way in other case is the plain type.
		note := fmt.Sprintf("--type %s is the mix %s (mix names are case-insensitive)", r.Type, r.FType.Name)
		if t, ok := formats.ParseType(r.Type); ok && t.IsGGML() {
			note += fmt.Sprintf("; for %s alone, with no mix upgrades, write --type %s", t, t)
		}
		out = append(out, note)
	}
	if r.Arch != "" && r.Format == "gguf" {
		arch := r.ComfyArch
		if arch == "" {
			arch = "(none)"
		}
		line := fmt.Sprintf("architecture: %s (general.architecture %s)", r.Arch, arch)
		if r.LlamaNames {
			line += "; tensors named as llama.cpp names them (--te-names sdcpp keeps the input's)"
		}
		out = append(out, line)
	}
	if r.Tokenizer != "" {
		out = append(out, "tokenizer: "+r.Tokenizer)
	}
	for _, c := range r.Consumers {
		status := "can load it"
		if !c.OK {
			status = "cannot load it: " + strings.Join(c.Problems, "; ")
		}
		out = append(out, fmt.Sprintf("%-8s %s", c.Name+":", status))
		for _, n := range c.Notes {
			out = append(out, fmt.Sprintf("%-8s note: %s", "", n))
		}
	}
	if r.Dequantized > 0 {
		out = append(out, fmt.Sprintf("dequantized: %s of the input decoded to %s", pipeline.Count(r.Dequantized, "quantized tensor", "quantized tensors"), r.FType.Base))
	}
	if n := len(r.ImatrixMissing); n > 0 {
		out = append(out, fmt.Sprintf("warning: imatrix: %s no entry and %s quantized without importance weights: %s",
			pipeline.Count(n, "tensor has", "tensors have"), plural(n, "is", "are"), pipeline.Examples(r.ImatrixMissing)))
	}
	if n := len(r.ImatrixUnused); n > 0 {
		out = append(out, fmt.Sprintf("imatrix: %s no quantized tensor: %s", pipeline.Count(n, "entry matched", "entries matched"), pipeline.Examples(r.ImatrixUnused)))
	}
	return out
}

// plural returns one for n == 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

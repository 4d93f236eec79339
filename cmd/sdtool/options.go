package main

import (
	"strings"
	"unicode"

	"github.com/sdtool/sdtool/internal/option"
)

// optionFlags spells the engine options whose flag is not their name in
// kebab case (option.Name "Budget.BPW" is --bpw, not --budget-bpw).
var optionFlags = map[option.Name]string{
	"Adapters":          "--lora",
	"Budget.BPW":        "--bpw",
	"Budget.Bytes":      "--budget",
	"Budget.Candidates": "--budget-types",
	"DType":             "--dtype",
	"Filters":           "--filter",
	"Rules":             "--tensor-type-rules", // convert's
	"Targets":           "--target",
	"TensorTypes":       "--tensor-type",
	"TextEncoderNames":  "--te-names",
	"Tokenizers":        "--tokenizer", // convert's
}

// flagOf returns the flag that sets an engine option: its entry in
// optionFlags, else its name in kebab case (AllowMissing is
// --allow-missing, Budget.Metric --budget-metric).
func flagOf(n option.Name) string {
	if f, ok := optionFlags[n]; ok {
		return f
	}
	var b strings.Builder
	b.WriteString("--")
	prev := rune(0)
	for _, r := range string(n) {
		switch {
		case r == '.':
			b.WriteByte('-')
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			b.WriteByte('-')
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(unicode.ToLower(r))
		}
		prev = r
	}
	return b.String()
}

package quantize

import (
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/pipeline"
)

// unmatchedRules returns a warning for every pattern of the user's type
// rules that matches none of names (whatever the rules' TYPE syntax).
func unmatchedRules(opts *Options, names []string) []string {
	flag := "--tensor-type"
	var rules []pipeline.Rule[string]
	keep := func(s string) (string, error) { return s, nil }
	if opts.TensorTypeRules != "" {
		flag = "--tensor-type-rules"
		rules, _ = pipeline.ParseRules(opts.TensorTypeRules, keep)
	}
	for _, s := range opts.TensorTypes {
		if r, err := pipeline.ParseRule(s, keep); err == nil {
			rules = append(rules, r)
		}
	}
	var out []string
	for _, r := range pipeline.UnmatchedRules(rules, names) {
		out = append(out, fmt.Sprintf("%s rule %q matches no tensor of %s", flag, r.Pattern+"="+r.Value, opts.Input))
	}
	return out
}

// ruleSet turns the --tensor-type (llama.cpp: last match wins) or
// --tensor-type-rules (sd.cpp: first match wins, comma-separated) options
// into a lookup of the type a tensor name gets, with parse reading each
// TYPE. It returns nil when neither option is given.
func ruleSet[T any](opts *Options, parse func(string) (T, error)) (func(string) (T, bool), error) {
	if len(opts.TensorTypes) > 0 && opts.TensorTypeRules != "" {
		return nil, option.Errorf("%s (llama.cpp: last match wins) and %s (sd.cpp: first match wins) cannot be combined", option.Name("TensorTypes"), option.Name("TensorTypeRules"))
	}
	var rules []pipeline.Rule[T]
	match := pipeline.LastMatch[T]
	if opts.TensorTypeRules != "" {
		var err error
		if rules, err = pipeline.ParseRules(opts.TensorTypeRules, parse); err != nil {
			return nil, option.Errorf("%s: %w", option.Name("TensorTypeRules"), err)
		}
		match = pipeline.FirstMatch[T]
	}
	for _, s := range opts.TensorTypes {
		r, err := pipeline.ParseRule(s, parse)
		if err != nil {
			return nil, option.Errorf("%s: %w", option.Name("TensorTypes"), err)
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		return nil, nil
	}
	return func(name string) (T, bool) {
		if i := match(rules, name); i >= 0 {
			return rules[i].Value, true
		}
		var zero T
		return zero, false
	}, nil
}

// parseGGMLRuleType reads a rule TYPE for GGUF outputs: a ggml type name
// (case-insensitive) that convert can write.
func parseGGMLRuleType(typ string) (formats.DType, error) {
	t, err := formats.LookupType(typ)
	if err != nil {
		return 0, err
	}
	if !t.IsGGML() {
		return 0, fmt.Errorf("type %s is not a ggml type", t)
	}
	if err := pipeline.CheckTarget(t); err != nil {
		return 0, err
	}
	return t, nil
}

// comfyChoice is the ComfyUI output a rule asks for: a quantized module
// type, a float type, or keep (the tensor stays as the input has it).
type comfyChoice struct {
	module convrot.Type
	float  formats.DType
	keep   bool
}

// parseComfyRuleType reads a rule TYPE for ComfyUI safetensors outputs:
// int8_convrot, int8, fp8_e4m3, fp8_e5m2, keep, or f16/bf16/f32.
func parseComfyRuleType(typ string) (comfyChoice, error) {
	if strings.EqualFold(typ, "keep") {
		return comfyChoice{keep: true}, nil
	}
	if ct, err := convrot.ParseType(typ); err == nil {
		return comfyChoice{module: ct}, nil
	}
	if t, ok := formats.ParseType(typ); ok && (t == formats.F16 || t == formats.BF16 || t == formats.F32) {
		return comfyChoice{float: t}, nil
	}
	err := formats.UnknownType(typ, []string{"int8_convrot", "int8", "fp8_e4m3", "fp8_e5m2", "keep", "f16", "bf16", "f32"})
	return comfyChoice{}, fmt.Errorf("%v: a ComfyUI output takes int8_convrot, int8, fp8_e4m3, fp8_e5m2, keep, f16, bf16 or f32", err)
}

package quantize

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/sdtool/sdtool/convert"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant/convrot"
)

// ruleSet turns the --tensor-type (last match wins) or --tensor-type-rules
// (first match wins, comma-separated) options into a lookup of the type a
// tensor name gets, with parse reading each TYPE. It returns nil when
// neither option is given.
func ruleSet[T any](opts *Options, parse func(string) (T, error)) (func(string) (T, bool), error) {
	if len(opts.TensorTypes) > 0 && opts.TensorTypeRules != "" {
		return nil, errors.New("--tensor-type (llama.cpp: last match wins) and --tensor-type-rules (sd.cpp: first match wins) cannot be combined")
	}
	type rule struct {
		re *regexp.Regexp
		t  T
	}
	var rules []rule
	add := func(flag, item, pat, typ string) error {
		t, err := parse(typ)
		if err != nil {
			return fmt.Errorf("%s %q: %v", flag, item, err)
		}
		re, err := convert.CompilePattern(pat)
		if err != nil {
			return fmt.Errorf("%s %q: %v", flag, item, err)
		}
		rules = append(rules, rule{re, t})
		return nil
	}
	firstWins := opts.TensorTypeRules != ""
	if firstWins {
		// sd.cpp's syntax: split on every comma, then at the first '='.
		for _, item := range strings.Split(opts.TensorTypeRules, ",") {
			if item == "" {
				continue
			}
			pat, typ, ok := strings.Cut(item, "=")
			if !ok {
				return nil, fmt.Errorf("--tensor-type-rules %q: want PATTERN=TYPE", item)
			}
			if err := add("--tensor-type-rules", item, pat, typ); err != nil {
				return nil, err
			}
		}
	}
	for _, s := range opts.TensorTypes {
		// Split at the last '=': type names have none, patterns may.
		i := strings.LastIndexByte(s, '=')
		if i <= 0 {
			return nil, fmt.Errorf("--tensor-type %q: want REGEX=TYPE", s)
		}
		if err := add("--tensor-type", s, s[:i], s[i+1:]); err != nil {
			return nil, err
		}
	}
	if len(rules) == 0 {
		return nil, nil
	}
	return func(name string) (T, bool) {
		for k := range rules {
			i := k
			if !firstWins {
				i = len(rules) - 1 - k
			}
			if rules[i].re.MatchString(name) {
				return rules[i].t, true
			}
		}
		var zero T
		return zero, false
	}, nil
}

// parseGGMLRuleType reads a rule TYPE for GGUF outputs: a ggml type name
// (case-insensitive) that convert can write.
func parseGGMLRuleType(typ string) (formats.DType, error) {
	t, ok := formats.ParseType(typ)
	if !ok || !t.IsGGML() {
		return 0, fmt.Errorf("unknown ggml type %q", typ)
	}
	if err := convert.CheckWritable(t); err != nil {
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
	return comfyChoice{}, fmt.Errorf("type %q: a ComfyUI output takes int8_convrot, int8, fp8_e4m3, fp8_e5m2, keep, f16, bf16 or f32", typ)
}

package convert

import (
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
)

// ParseRules parses sd.cpp's --tensor-type-rules (pipeline.ParseRules) with
// TYPE read as sd-cli reads it (ParseTargetType).
func ParseRules(s string) ([]pipeline.Rule[formats.DType], error) {
	return pipeline.ParseRules(s, ParseTargetType)
}

// ParseTargetType parses a --type or rule type name the way sd-cli does
// (exact ggml spelling, case-sensitive) and refuses types that cannot be
// written (pipeline.CheckTarget).
func ParseTargetType(name string) (formats.DType, error) {
	t, ok := formats.TypeByName(name)
	if !ok {
		if alt, ok := formats.ParseType(name); ok && alt.IsGGML() {
			return 0, fmt.Errorf("unknown type %q (type names are case-sensitive: did you mean %q?)", name, alt.String())
		}
		if strings.HasPrefix(strings.ToLower(name), "fp8") || strings.HasPrefix(strings.ToLower(name), "f8") {
			return 0, fmt.Errorf("type %q: FP8 is not a GGUF type; use `sdtool quantize --type fp8_e4m3` to write ComfyUI FP8 safetensors", name)
		}
		return 0, fmt.Errorf("unknown type %q", name)
	}
	if err := pipeline.CheckTarget(t); err != nil {
		return 0, err
	}
	return t, nil
}

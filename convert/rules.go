package convert

import (
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/mix"
)

// ParseRules parses sd.cpp's --tensor-type-rules (pipeline.ParseRules) with
// TYPE read as sd-cli reads it (ParseTargetType).
func ParseRules(s string) ([]pipeline.Rule[formats.DType], error) {
	return pipeline.ParseRules(s, ParseTargetType)
}

// ParseTargetType parses a --type or rule type name with formats.LookupType
// (ggml's spelling or any other capitalisation of it: sd-cli takes only the
// exact one, but no two ggml names differ only in case, so "Q8_0" is q8_0)
// and refuses types that cannot be written (pipeline.CheckTarget).
func ParseTargetType(name string) (formats.DType, error) {
	if l := strings.ToLower(name); strings.HasPrefix(l, "fp8") || strings.HasPrefix(l, "f8") {
		return 0, fmt.Errorf("type %q: FP8 is not a GGUF type; use `sdtool quantize --type fp8_e4m3` to write ComfyUI FP8 safetensors", name)
	}
	t, err := mix.LookupSingleType(name, convrot.Names(), "")
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

package convert

import (
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
)

// neverConvertedSubstrings are name fragments that sd.cpp never converts
// (tensor_should_be_converted in model_loader.cpp).
var neverConvertedSubstrings = []string{
	"img_in.", "txt_in.", "time_in.", "vector_in.", "guidance_in.", "final_layer.",
	"x_embedder.", "t_embedder.", "y_embedder.", "pos_embed", "context_embedder.",
	"time_embed.", "label_emb.", "embedding",
}

// neverConvertedSuffixes are name endings that sd.cpp never converts.
var neverConvertedSuffixes = []string{".bias", ".scale", ".weight_scale"}

// Decision is the outcome of the type policy for one tensor.
type Decision struct {
	// Type is the output type.
	Type formats.DType
	// Rule is the index of the matching --tensor-type-rules item, or -1.
	Rule int
	// Kept explains why the tensor keeps its storage type although a target
	// was asked for ("" when it is converted or no target applies).
	Kept string
}

// Decide applies sd.cpp's policy: the target is --type (hasType false means
// none), overridden by the first rule whose pattern matches the name; the
// tensor then changes type only if sd.cpp's exclusions allow it. storage is
// the type sd.cpp holds the tensor in (after F64→F32, F8→F16, ...), and
// rowLen the innermost dimension.
func Decide(name string, storage formats.DType, rowLen int64, int8Tensorwise bool, target formats.DType, hasType bool, rules []pipeline.Rule[formats.DType]) Decision {
	d := Decision{Type: storage, Rule: -1}
	if i := pipeline.FirstMatch(rules, name); i >= 0 {
		target, hasType, d.Rule = rules[i].Value, true, i
	}
	if !hasType {
		return d
	}
	if reason := exclusion(name, storage, rowLen, int8Tensorwise, target); reason != "" {
		if target != storage {
			d.Kept = reason
		}
		return d
	}
	if !convertible(storage) && target != storage {
		// sd-cli calls std::terminate here; sdtool keeps the tensor and says so.
		d.Kept = storage.String() + " has no float conversion"
		return d
	}
	d.Type = target
	return d
}

// exclusion returns why sd.cpp refuses to convert the tensor, or "".
func exclusion(name string, storage formats.DType, rowLen int64, int8Tensorwise bool, target formats.DType) string {
	if int8Tensorwise {
		return "ComfyUI int8_tensorwise weight"
	}
	if target.Quantized() && rowLen%int64(target.Info().BlockSize) != 0 {
		return fmt.Sprintf("row of %d is not a multiple of the %s block size %d", rowLen, target, target.Info().BlockSize)
	}
	for _, s := range neverConvertedSuffixes {
		if strings.HasSuffix(name, s) {
			return "sd.cpp never converts *" + s
		}
	}
	for _, s := range neverConvertedSubstrings {
		if strings.Contains(name, s) {
			return "sd.cpp never converts names containing " + s
		}
	}
	return ""
}

// convertible reports whether sd.cpp can turn a tensor of this storage type
// into floats (ggml's to_float exists).
func convertible(t formats.DType) bool {
	switch t {
	case formats.I8, formats.I16, formats.I32, formats.I64, formats.F64:
		return false
	}
	return t.IsGGML()
}

package mix

import (
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// A single-type command takes ggml names, and points mixes and ComfyUI
// types to quantize instead of suggesting a near ggml name (issue 34,
// item 11: Q4_K_M got "did you mean q4_K?").
func TestLookupSingleType(t *testing.T) {
	comfy := []string{"int8_convrot", "int8", "fp8_e4m3", "fp8_e5m2"}
	if typ, err := LookupSingleType("Q8_0", comfy, ""); err != nil || typ != formats.Q8_0 {
		t.Errorf("Q8_0: %v, %v", typ, err)
	}
	for name, want := range map[string]string{
		"Q4_K_M":       "--type Q4_K_M`",
		"q3_k_s":       "mostly q3_K",
		"INT8_CONVROT": "--type int8_convrot`; more",
		"q4km":         `unknown type "q4km" (did you mean Q4_K_M?)`,
	} {
		if _, err := LookupSingleType(name, comfy, "more"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
}

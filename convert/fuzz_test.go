package convert

import (
	"strings"
	"testing"

	"github.com/sdtool/sdtool/pipeline"
)

// FuzzParseRules: any --tensor-type-rules text is parsed or refused with an
// error, never a panic, and every accepted rule has a compiled pattern and
// a writable type.
func FuzzParseRules(f *testing.F) {
	for _, s := range []string{`^vae\.=f16,model\.=q8_0`, "fc1=q5_K,weight=q6_K", "(?!x)y=q8_0", "a=Q8_0", ",,=,", `\u0041=q4_0`, "x[=f32"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rules, err := ParseRules(s)
		if err != nil {
			return
		}
		if len(rules) > strings.Count(s, "=") {
			t.Fatalf("%d rules from %q", len(rules), s)
		}
		for _, r := range rules {
			if r.Re == nil || pipeline.CheckTarget(r.Value) != nil {
				t.Fatalf("rule %+v accepted", r)
			}
			r.Re.MatchString("model.diffusion_model.input_blocks.1.1.weight")
		}
	})
}

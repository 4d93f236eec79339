package merge

import (
	"math"
	"strings"
	"testing"
)

// FuzzParseRecipe checks that no input makes the recipe parser panic, and
// that what it accepts satisfies the rules it enforces.
func FuzzParseRecipe(f *testing.F) {
	f.Add([]byte(issueRecipe))
	f.Add([]byte(doublingRecipe))
	f.Add([]byte(`{"sources": [{"path": "a", "include": ["x"], "rename": [["a(\\d)", "$1"]], "prefix": "p", "strip_prefix": "s"}], "metadata": {"k": "v"}}`))
	f.Add([]byte(`{"sources": [{"path": "a", "include": []}]}`))
	f.Add([]byte(`[1, {"a": null}, "x", true, 1e400]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRecipe("fuzz.json", data)
		if err != nil {
			return
		}
		if len(r.Sources) == 0 {
			t.Fatal("accepted a recipe without sources")
		}
		for i, s := range r.Sources {
			if s.Path == "" || len(s.Include) == 0 || len(s.include) != len(s.Include) || len(s.exclude) != len(s.Exclude) {
				t.Fatalf("source %d accepted incomplete: %+v", i, s)
			}
			_ = s.Selects("x.weight")
			for _, name := range []string{"x.weight", "model.diffusion_model.input_blocks.1.0.weight"} {
				got, err := s.OutputName(name)
				if err != nil {
					if !strings.Contains(err.Error(), "longer than") {
						t.Fatalf("OutputName(%q): %v", name, err)
					}
					continue
				}
				// The bounded renamer agrees with the standard library's.
				want := strings.TrimPrefix(name, s.StripPrefix)
				for _, rn := range s.Rename {
					want = rn.re.ReplaceAllString(want, rn.Replace)
				}
				if got != s.Prefix+want || len(got) > MaxOutputName {
					t.Fatalf("OutputName(%q) = %q, want %q", name, got, s.Prefix+want)
				}
			}
		}
	})
}

// FuzzParseAlphaRules checks that no --alpha-rules text makes the parser
// panic, and that accepted rules have patterns and finite alphas.
func FuzzParseAlphaRules(f *testing.F) {
	f.Add(`input_blocks\.[0-9]{1,2}\.=0.3,out=0.7`)
	f.Add(`a=1,,b=-2e-3`)
	f.Add(`x`)
	f.Fuzz(func(t *testing.T, s string) {
		rules, err := ParseAlphaRules(s)
		if err != nil {
			return
		}
		for _, r := range rules {
			if r.Pattern == "" || r.Re == nil || math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
				t.Fatalf("accepted %+v from %q", r, s)
			}
			_ = alphaFor(rules, "model.input_blocks.1.weight", 0.5)
		}
	})
}

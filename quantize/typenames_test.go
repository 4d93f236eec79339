package quantize

import (
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// A mix named in another case says in the plan which mix it is and how to
// ask for the plain type; the canonical spellings and plain types do not.
func TestMixSpellingIsNoted(t *testing.T) {
	src := mustOpen(t, tinyPath)
	defer src.Close()
	for _, c := range []struct {
		typ, want string
		base      formats.DType
		plain     bool
	}{
		{"q4_k", "--type q4_k is the mix Q4_K_M (mix names are case-insensitive); for q4_K alone, with no mix upgrades, write --type q4_K", formats.Q4_K, false},
		{"q4_k_m", "--type q4_k_m is the mix Q4_K_M", formats.Q4_K, false},
		{"q4_K", "", formats.Q4_K, true},
		{"Q4_K_M", "", formats.Q4_K, false},
	} {
		r := plan(t, src, Options{Type: c.typ})
		got := strings.Join(notes(r.Report), "\n")
		if c.want != "" && !strings.Contains(got, c.want) || c.want == "" && strings.Contains(got, "is the mix") {
			t.Errorf("--type %s: notes\n%s\nwant %q", c.typ, got, c.want)
		}
		if r.FType.Base != c.base || r.FType.Plain != c.plain {
			t.Errorf("--type %s: %+v", c.typ, r.FType)
		}
	}
}

// Every command's unknown type gets the same wording with a suggestion.
func TestUnknownTypeSuggests(t *testing.T) {
	src := mustOpen(t, tinyPath)
	defer src.Close()
	for typ, want := range map[string]string{"q4k": "did you mean q4_K?", "int8convrot": "did you mean int8_convrot?", "Q4_K_X": "did you mean Q4_K_S?"} {
		_, _, err := PlanModel(&Options{Type: typ, Output: "out.gguf"}, src)
		if err == nil || !strings.Contains(err.Error(), `unknown type "`+typ+`" (`+want+`)`) {
			t.Errorf("--type %s: %v", typ, err)
		}
	}
	_, _, err := PlanModel(&Options{Type: "q8_0", Output: "out.gguf", TensorTypes: []string{"attn=q4k"}}, src)
	if err == nil || !strings.Contains(err.Error(), `unknown type "q4k" (did you mean q4_K?)`) {
		t.Errorf("--tensor-type: %v", err)
	}
}

// quantize refuses an output whose extension is not the type's format.
func TestQuantizeRefusesOtherExtensions(t *testing.T) {
	src := mustOpen(t, tinyPath)
	defer src.Close()
	for _, c := range []struct{ typ, out string }{{"Q8_0", "out.bin"}, {"Q8_0", "out.safetensors"}, {"int8", "out.gguf"}} {
		if _, _, err := PlanModel(&Options{Type: c.typ, Output: c.out}, src); err == nil || !strings.Contains(err.Error(), "the output must end in") {
			t.Errorf("--type %s -o %s: %v", c.typ, c.out, err)
		}
	}
}

// A --tensor-type or --tensor-type-rules rule that matches no tensor is
// reported by its text; one that matches is not.
func TestQuantizeReportsUnmatchedRules(t *testing.T) {
	src := mustOpen(t, tinyPath)
	defer src.Close()
	r := plan(t, src, Options{Type: "Q8_0", TensorTypes: []string{"nomatch=f16", `attn2\.to_k=f16`}})
	got := strings.Join(r.Notes, "\n")
	if !strings.Contains(got, `--tensor-type rule "nomatch=f16" matches no tensor`) || strings.Contains(got, "to_k=f16") {
		t.Errorf("notes:\n%s", got)
	}
	r = plan(t, src, Options{Type: "int8", TensorTypeRules: "zzz=f16,mlp=keep", Output: "o.safetensors"})
	got = strings.Join(r.Notes, "\n")
	if !strings.Contains(got, `--tensor-type-rules rule "zzz=f16" matches no tensor`) || strings.Contains(got, "mlp=keep") {
		t.Errorf("notes:\n%s", got)
	}
}

package quantize

import (
	"strings"
	"testing"
)

// FuzzParseOptions feeds arbitrary text to the option parsers (--tensor-type,
// --tensor-type-rules, --metadata, --target): they must return an error or
// a usable result, never panic, and a parsed rule must only give types
// that can be written.
func FuzzParseOptions(f *testing.F) {
	for _, s := range []string{"attn=q8_0", "a(b=c)=q4_K", "x=f16,y=q6_K", "=q8_0", "a=", "(?=x)=q8_0", "k=v", "sdcpp,comfyui", "all", "a{1,2}=iq4_nl"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names := []string{"", "a.weight", s, strings.Repeat("attn.", 3) + "weight"}
		for _, o := range []Options{{TensorTypes: []string{s}}, {TensorTypeRules: s}, {TensorTypes: strings.Split(s, ";")}} {
			ov, err := parseOverrides(&o)
			if err != nil || ov == nil {
				continue
			}
			for _, n := range names {
				if typ, ok := ov(n); ok && (!typ.IsGGML() || !typ.InLinkedGGML()) {
					t.Fatalf("rule %q gave type %v", s, typ)
				}
			}
		}
		if kv, err := parseMetadata([]string{s}); err == nil && (len(kv) != 1 || kv[0][0] == "") {
			t.Fatalf("--metadata %q parsed to %v", s, kv)
		}
		if ts, err := ParseTargets([]string{s}); err == nil && len(ts) == 0 {
			t.Fatalf("--target %q gave no targets", s)
		}
	})
}

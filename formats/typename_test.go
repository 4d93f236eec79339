package formats

import (
	"strings"
	"testing"
)

func TestLookupType(t *testing.T) {
	for name, want := range map[string]DType{"q4_K": Q4_K, "Q4_K": Q4_K, "q4_k": Q4_K, "Q8_0": Q8_0, "IQ4_XS": IQ4_XS, "BF16": BF16} {
		if got, err := LookupType(name); err != nil || got != want {
			t.Errorf("LookupType(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	for name, suggestion := range map[string]string{"q4k": "q4_K", "q80": "q8_0", "iq4xs": "iq4_xs"} {
		_, err := LookupType(name)
		if err == nil || err.Error() != `unknown type "`+name+`" (did you mean `+suggestion+`?)` {
			t.Errorf("LookupType(%q): %v, want the suggestion %s", name, err, suggestion)
		}
	}
	if _, err := LookupType("banana"); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("a name close to nothing: %v", err)
	}
	if err := UnknownType("int8convrot", []string{"int8_convrot", "int8", "fp8_e4m3"}); !strings.Contains(err.Error(), "did you mean int8_convrot?") {
		t.Errorf("suggestion among a command's own names: %v", err)
	}
}

func TestFormatShape(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		want string
	}{{[]int64{77, 64}, "[77, 64]"}, {[]int64{8}, "[8]"}, {nil, "[]"}, {[]int64{320, 4, 3, 3}, "[320, 4, 3, 3]"}} {
		if got := FormatShape(c.in); got != c.want {
			t.Errorf("FormatShape(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzLookupType: no name panics, an accepted name is a known type whose
// own name reads back as it, and every refusal is the one wording.
func FuzzLookupType(f *testing.F) {
	for _, s := range []string{"q4_K", "Q8_0", "q4k", "", "int8convrot", "ÿ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		typ, err := LookupType(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "unknown type ") && err.Error() != "no type given" {
				t.Fatalf("LookupType(%q): %v", s, err)
			}
			return
		}
		if back, err := LookupType(typ.String()); err != nil || back != typ {
			t.Fatalf("%q -> %v does not read back: %v %v", s, typ, back, err)
		}
	})
}

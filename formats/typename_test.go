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

// Suggest knows names written without underscores, in another case, or
// begun: the q4km, Q4KM and fp8 got q4_0 and f16 (issue 34, item 11).
func TestSuggest(t *testing.T) {
	valid := append(TypeNames(), "Q4_K_S", "Q4_K_M", "Q8_0", "int8_convrot", "int8", "fp8_e4m3", "fp8_e5m2")
	for in, want := range map[string]string{
		"q4km": "Q4_K_M", "Q4KM": "Q4_K_M", "q4-k-s": "Q4_K_S", "fp8": "fp8_e4m3 fp8_e5m2", "FP8E4M3": "fp8_e4m3",
		"int8convrot": "int8_convrot", "q4k": "q4_K", "Q4_K_X": "Q4_K_S", "banana": "",
	} {
		if got := strings.Join(Suggest(in, valid), " "); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Suggest("q4", valid); len(got) != maxSuggestions || got[0] != "q4_0" {
		t.Errorf("Suggest(q4) = %q, want the first %d names it begins", got, maxSuggestions)
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

// TestTypeNamesDifferInCase: ParseType's case-insensitive lookup is one
// map, which needs every name to be unique in lower case.
func TestTypeNamesDifferInCase(t *testing.T) {
	seen := map[string]string{}
	for _, n := range TypeNames() {
		if o, dup := seen[strings.ToLower(n)]; dup {
			t.Errorf("type names %q and %q differ only in case", o, n)
		}
		seen[strings.ToLower(n)] = n
	}
}

// naiveNearest is nearest as first written: every name compared in full.
func naiveNearest(name string, valid []string) string {
	full := func(a, b string) int {
		prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
		for j := range prev {
			prev[j] = j
		}
		for i := 1; i <= len(a); i++ {
			cur[0] = i
			for j := 1; j <= len(b); j++ {
				cost := 1
				if a[i-1] == b[j-1] {
					cost = 0
				}
				cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			}
			prev, cur = cur, prev
		}
		return prev[len(b)]
	}
	best, bestD, bestRaw := "", -1, 0
	for _, v := range valid {
		d, r := full(nameKey(name), nameKey(v)), full(strings.ToLower(name), strings.ToLower(v))
		if bestD < 0 || d < bestD || d == bestD && r < bestRaw {
			best, bestD, bestRaw = v, d, r
		}
	}
	if bestD < 0 || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// TestNearestMatchesNaive: the bounded search (names too long or too short
// skipped, rows stopped over the limit) suggests what comparing every name
// in full does, for typos, capitalisations, long and non-ASCII names.
func TestNearestMatchesNaive(t *testing.T) {
	names := TypeNames()
	inputs := []string{"", "q", "q4", "q4k", "Q4K", "q4_k_m", "iq4xs", "iq2_xxxs", "f8e4m3", "f8_e4m3fnuzz", "bf61",
		"int8convrot", "tq1", "mxfp", "q4_\u212a", "ÿ", "\xff\xfe", strings.Repeat("q4_K", 3), strings.Repeat("x", 100)}
	for _, a := range names {
		for i := range len(a) + 1 {
			inputs = append(inputs, a[:i]+"x"+a[i:], a[:i]+a[min(i+1, len(a)):], strings.ToUpper(a[:i])+a[i:])
		}
	}
	for _, in := range inputs {
		for _, valid := range [][]string{names, {"int8_convrot", "int8", "fp8_e4m3", "keep", "F16"}} {
			if got, want := nearest(in, valid), naiveNearest(in, valid); got != want {
				t.Errorf("nearest(%q) = %q, want %q", in, got, want)
			}
		}
	}
}

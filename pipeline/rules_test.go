package pipeline

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func atoi(s string) (int, error) { return strconv.Atoi(s) }

// ParseRules splits on every comma and at the first '='; ParseRule at the
// last '='; FirstMatch and LastMatch pick sd.cpp's and llama.cpp's winner.
func TestRules(t *testing.T) {
	rules, err := ParseRules(",a=1,,b.*=2,a=3,", atoi)
	if err != nil || len(rules) != 3 || rules[1].Pattern != "b.*" || rules[2].Value != 3 {
		t.Fatalf("ParseRules = %+v, %v", rules, err)
	}
	if i := FirstMatch(rules, "xa"); i != 0 {
		t.Errorf("FirstMatch = %d, want 0", i)
	}
	if i := LastMatch(rules, "xa"); i != 2 {
		t.Errorf("LastMatch = %d, want 2", i)
	}
	if i := FirstMatch(rules, "zzz"); i != -1 {
		t.Errorf("no match = %d", i)
	}
	r, err := ParseRule(`x{1,2}=y=5`, func(s string) (string, error) { return s, nil })
	if err != nil || r.Pattern != "x{1,2}=y" || r.Value != "5" {
		t.Errorf("ParseRule = %+v, %v", r, err)
	}
	for in, want := range map[string]string{
		"noequals":   `rule "noequals": want PATTERN=TYPE`,
		"a=x":        `rule "a=x": strconv.Atoi`,
		"(?!a)b=1":   "lookahead",
		"a[=1":       `pattern "a["`,
		`\u0041=1`:   `\x{XXXX}`,
		"ok=1,[^]=2": "empty classes",
	} {
		if _, err := ParseRules(in, atoi); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRules(%q) = %v, want %q", in, err, want)
		}
	}
	if _, err := ParseRule("=1", atoi); err == nil || !strings.Contains(err.Error(), "want REGEX=TYPE") {
		t.Errorf("ParseRule(=1) = %v", err)
	}
}

func TestCheckTarget(t *testing.T) {
	for _, name := range []string{"f32", "f16", "q4_K", "iq4_xs", "q8_0"} {
		if err := CheckTarget(mustType(t, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"q8_1", "q8_K", "i8", "f64", "q2_0"} {
		if err := CheckTarget(mustType(t, name)); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

func mustType(t *testing.T, name string) formats.DType {
	t.Helper()
	d, ok := formats.ParseType(name)
	if !ok {
		t.Fatalf("no type %s", name)
	}
	return d
}

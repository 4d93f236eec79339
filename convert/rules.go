// Package convert reproduces stable-diffusion.cpp's convert mode (`sd-cli -M
// convert`): how inputs are loaded and named, which tensors change type, and
// the --tensor-type-rules semantics, so that sdtool writes the same GGUF bytes.
package convert

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// Rule is one PATTERN=TYPE item of --tensor-type-rules.
type Rule struct {
	// Pattern is the regular expression as the user wrote it.
	Pattern string
	// Re is the compiled pattern, searched anywhere in the name (unanchored).
	Re *regexp.Regexp
	// Type is the target type.
	Type formats.DType
}

// ecmaOnly lists ECMAScript regex features that Go's RE2 syntax lacks, with
// the message shown when a pattern uses one.
var ecmaOnly = []struct {
	re  *regexp.Regexp
	msg string
}{
	{regexp.MustCompile(`\(\?[=!]`), "lookahead (?= or (?! is not supported (Go regexp is RE2)"},
	{regexp.MustCompile(`\(\?<[=!]`), "lookbehind (?<= or (?<! is not supported (Go regexp is RE2)"},
	{regexp.MustCompile(`\\[1-9]`), "backreferences (\\1 ...) are not supported (Go regexp is RE2)"},
	{regexp.MustCompile(`\\u[0-9A-Fa-f]{4}`), "\\uXXXX escapes are not supported; write \\x{XXXX}"},
	{regexp.MustCompile(`\\c[A-Za-z]`), "\\cX control escapes are not supported"},
	{regexp.MustCompile(`\[\^?\]`), "empty classes [] and [^] are not supported"},
}

// CompilePattern compiles a rule pattern with Go's regexp, turning errors
// about ECMAScript-only syntax into messages that say what to write instead.
func CompilePattern(p string) (*regexp.Regexp, error) {
	for _, e := range ecmaOnly {
		if e.re.MatchString(p) {
			return nil, fmt.Errorf("pattern %q: %s", p, e.msg)
		}
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %v", p, err)
	}
	return re, nil
}

// ParseRules parses sd.cpp's --tensor-type-rules syntax:
// "PATTERN=TYPE[,PATTERN=TYPE...]". Items are split on every comma (so a
// pattern cannot contain one) and at the first '='; empty items are skipped.
// Unlike sd-cli, which silently drops a bad item and crashes on a bad regex,
// every problem is an error here. TYPE is a ggml type name as ggml spells it
// ("q4_K"); see CheckWritable for which types are allowed.
func ParseRules(s string) ([]Rule, error) {
	var rules []Rule
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			continue
		}
		pat, typ, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("tensor type rule %q: want PATTERN=TYPE", item)
		}
		t, err := ParseTargetType(typ)
		if err != nil {
			return nil, fmt.Errorf("tensor type rule %q: %v", item, err)
		}
		re, err := CompilePattern(pat)
		if err != nil {
			return nil, fmt.Errorf("tensor type rule %q: %v", item, err)
		}
		rules = append(rules, Rule{Pattern: pat, Re: re, Type: t})
	}
	return rules, nil
}

// ParseTargetType parses a --type or rule type name the way sd-cli does
// (exact ggml spelling, case-sensitive) and refuses types that cannot be
// written.
func ParseTargetType(name string) (formats.DType, error) {
	t, ok := formats.TypeByName(name)
	if !ok {
		if alt, ok := formats.ParseType(name); ok && alt.IsGGML() {
			return 0, fmt.Errorf("unknown type %q (type names are case-sensitive: did you mean %q?)", name, alt.String())
		}
		if strings.HasPrefix(strings.ToLower(name), "fp8") || strings.HasPrefix(strings.ToLower(name), "f8") {
			return 0, fmt.Errorf("type %q: FP8 is not a GGUF type; use `sdtool quantize --type fp8_e4m3` to write ComfyUI FP8 safetensors", name)
		}
		return 0, fmt.Errorf("unknown type %q", name)
	}
	if err := CheckWritable(t); err != nil {
		return 0, err
	}
	return t, nil
}

// CheckWritable reports whether convert can produce tensors of type t: f32
// and every ggml type with a float conversion and a quantizer in the linked
// ggml. q8_1, q8_K, the integer types and f64 are refused (sd-cli aborts on
// them), and so are the types newer than the linked ggml.
func CheckWritable(t formats.DType) error {
	if !t.IsGGML() {
		return fmt.Errorf("type %s is not a ggml type", t)
	}
	switch t {
	case formats.Q8_1, formats.Q8_K, formats.I8, formats.I16, formats.I32, formats.I64, formats.F64:
		return fmt.Errorf("type %s cannot be written by convert (sd-cli aborts on it)", t)
	}
	if !t.InLinkedGGML() {
		return fmt.Errorf("type %s is newer than the ggml that sd-cli and sdtool link; sd-cli cannot load it", t)
	}
	return nil
}

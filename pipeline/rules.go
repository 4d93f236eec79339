package pipeline

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// Rule is one PATTERN=VALUE item of a tensor rule list (sd.cpp's and
// llama.cpp's --tensor-type rules, merge's --alpha-rules): a tensor whose
// name the pattern matches, anywhere in the name, gets Value.
type Rule[T any] struct {
	// Pattern is the regular expression as the user wrote it.
	Pattern string
	// Re is the compiled pattern (unanchored).
	Re *regexp.Regexp
	// Value is what a matching tensor gets.
	Value T
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

// ParseRules parses sd.cpp's --tensor-type-rules syntax,
// "PATTERN=VALUE[,PATTERN=VALUE...]", with parse reading each VALUE. Items
// are split on every comma (so a pattern cannot contain one) and at the
// first '='; empty items are skipped. Unlike sd-cli, which silently drops a
// bad item and crashes on a bad regex, every problem is an error that
// names the item.
func ParseRules[T any](s string, parse func(string) (T, error)) ([]Rule[T], error) {
	var rules []Rule[T]
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			continue
		}
		pat, val, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("rule %q: want PATTERN=TYPE", item)
		}
		r, err := newRule(pat, val, parse)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %v", item, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// ParseRule parses one REGEX=VALUE item of llama.cpp's --tensor-type,
// split at the last '=': value names have none, patterns may.
func ParseRule[T any](s string, parse func(string) (T, error)) (Rule[T], error) {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 {
		return Rule[T]{}, fmt.Errorf("rule %q: want REGEX=TYPE", s)
	}
	r, err := newRule(s[:i], s[i+1:], parse)
	if err != nil {
		return Rule[T]{}, fmt.Errorf("rule %q: %v", s, err)
	}
	return r, nil
}

func newRule[T any](pat, val string, parse func(string) (T, error)) (Rule[T], error) {
	v, err := parse(val)
	if err != nil {
		return Rule[T]{}, err
	}
	re, err := CompilePattern(pat)
	if err != nil {
		return Rule[T]{}, err
	}
	return Rule[T]{Pattern: pat, Re: re, Value: v}, nil
}

// FirstMatch returns the index of the first rule whose pattern matches
// name (sd.cpp: the first match wins), or -1.
func FirstMatch[T any](rules []Rule[T], name string) int {
	for i := range rules {
		if rules[i].Re.MatchString(name) {
			return i
		}
	}
	return -1
}

// LastMatch returns the index of the last rule whose pattern matches name
// (llama.cpp: the last match wins), or -1.
func LastMatch[T any](rules []Rule[T], name string) int {
	for i := len(rules) - 1; i >= 0; i-- {
		if rules[i].Re.MatchString(name) {
			return i
		}
	}
	return -1
}

// CheckTarget reports whether a rule or --type may ask for type t in a GGUF
// that sd.cpp loads: f32 and every ggml type with a float conversion and a
// quantizer in the linked ggml. q8_1, q8_K, the integer types and f64 are
// refused (sd-cli aborts on them), and so are the types newer than the
// linked ggml.
func CheckTarget(t formats.DType) error {
	if !t.IsGGML() {
		return fmt.Errorf("type %s is not a ggml type", t)
	}
	switch t {
	case formats.Q8_1, formats.Q8_K, formats.I8, formats.I16, formats.I32, formats.I64, formats.F64:
		return fmt.Errorf("type %s cannot be written (sd-cli aborts on it)", t)
	}
	if !t.InLinkedGGML() {
		return fmt.Errorf("type %s is newer than the ggml that sd-cli and sdtool link; sd-cli cannot load it", t)
	}
	return nil
}

// UnmatchedRules returns the rules whose pattern matches none of names: a
// typo in a pattern, or a rule written for another model, which would
// otherwise be accepted without a word.
func UnmatchedRules[T any](rules []Rule[T], names []string) []Rule[T] {
	var out []Rule[T]
	for _, r := range rules {
		matched := false
		for _, n := range names {
			if r.Re.MatchString(n) {
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, r)
		}
	}
	return out
}

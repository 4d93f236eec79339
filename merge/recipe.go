package merge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// Recipe is a rule-based merge: which tensors each source contributes, under
// which output names, and the output's metadata. See docs/merge-recipe.md.
type Recipe struct {
	// File is the recipe's path (or name), used in errors; relative source
	// paths are resolved against its directory.
	File string
	// Sources are the input files in output order.
	Sources []Source
	// Metadata is written into the output (string values only).
	Metadata map[string]string
}

// Source is one input file of a recipe and its selection rules; its
// patterns are compiled by ParseRecipe, so Sources come from a parsed Recipe.
type Source struct {
	// Path is the input file as written in the recipe.
	Path string
	// Include lists patterns of which at least one must match a tensor name (required, non-empty).
	Include []string
	// Exclude lists patterns of which none may match (exclude wins over include).
	Exclude []string
	// Prefix is prepended to the output name after StripPrefix and Rename.
	Prefix string
	// StripPrefix is removed from the start of names that have it, before Rename.
	StripPrefix string
	// Rename rewrites names in order, after StripPrefix and before Prefix.
	Rename []Rename

	include, exclude []*regexp.Regexp
}

// Rename is one regex/replacement pair; the replacement may use $1 or ${name}
// (Go's regexp.Expand syntax) and replaces every match.
type Rename struct {
	// Pattern is the regular expression.
	Pattern string
	// Replace is the replacement text.
	Replace string

	re *regexp.Regexp
}

// LoadRecipe reads and parses a recipe file.
func LoadRecipe(path string) (*Recipe, error) {
	data, err := formats.ReadRegular(path, formats.MaxTextFile)
	if err != nil {
		return nil, err
	}
	return ParseRecipe(path, data)
}

// ParseRecipe parses and checks a recipe's JSON. Errors name the file and the
// field ("r.json: sources[1].include[0]: ..."); unknown fields, wrong types,
// duplicate keys, missing or empty include lists and bad patterns are all
// errors, and every problem found is reported.
func ParseRecipe(file string, data []byte) (*Recipe, error) {
	v, err := decodeStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	p := &recipeParser{file: file}
	r := p.recipe(v)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	r.File = file
	return r, nil
}

// object is a decoded JSON object that remembers its key order (so that
// errors come in file order) and was checked for duplicate keys.
type object struct {
	keys []string
	vals map[string]any
}

// decodeStrict decodes one JSON value into object, []any, string,
// json.Number, bool and nil, refusing duplicate keys and trailing data.
func decodeStrict(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the recipe object at byte %d", dec.InputOffset())
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, path string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("invalid JSON at byte %d: %v", dec.InputOffset(), err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("invalid JSON at byte %d: %v", dec.InputOffset(), err)
				}
				k := kt.(string)
				sub := joinPath(path, k)
				if _, dup := o.vals[k]; dup {
					return nil, fmt.Errorf("%s: key appears twice", sub)
				}
				v, err := decodeValue(dec, sub)
				if err != nil {
					return nil, err
				}
				o.keys = append(o.keys, k)
				o.vals[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("invalid JSON at byte %d: %v", dec.InputOffset(), err)
			}
			return o, nil
		case '[':
			var list []any
			for dec.More() {
				v, err := decodeValue(dec, fmt.Sprintf("%s[%d]", path, len(list)))
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("invalid JSON at byte %d: %v", dec.InputOffset(), err)
			}
			if list == nil {
				list = []any{}
			}
			return list, nil
		}
	}
	return tok, nil
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// kind names a decoded JSON value's type for error messages.
func kind(v any) string {
	switch v.(type) {
	case *object:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

type recipeParser struct {
	file string
	errs []error
}

func (p *recipeParser) fail(path, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s: %s", p.file, path, fmt.Sprintf(format, args...)))
}

// fields checks that v is an object with only the allowed keys and that the
// required ones are present.
func (p *recipeParser) fields(path string, v any, required []string, optional ...string) (*object, bool) {
	o, ok := v.(*object)
	if !ok {
		p.fail(path, "want an object, got %s", kind(v))
		return nil, false
	}
	allowed := map[string]bool{}
	for _, k := range append(append([]string(nil), required...), optional...) {
		allowed[k] = true
	}
	for _, k := range o.keys {
		if !allowed[k] {
			names := append(append([]string(nil), required...), optional...)
			sort.Strings(names)
			p.fail(joinPath(path, k), "unknown field (known: %s)", strings.Join(names, ", "))
		}
	}
	for _, k := range required {
		if _, ok := o.vals[k]; !ok {
			p.fail(joinPath(path, k), "required field is missing")
		}
	}
	return o, true
}

func (p *recipeParser) str(path string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.fail(path, "want a string, got %s", kind(v))
	}
	return s, ok
}

func (p *recipeParser) strings(path string, v any) []string {
	list, ok := v.([]any)
	if !ok {
		p.fail(path, "want an array of strings, got %s", kind(v))
		return nil
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		if s, ok := p.str(fmt.Sprintf("%s[%d]", path, i), e); ok {
			out = append(out, s)
		}
	}
	return out
}

func (p *recipeParser) patterns(path string, list []string) []*regexp.Regexp {
	out := make([]*regexp.Regexp, 0, len(list))
	for i, s := range list {
		re, err := regexp.Compile(s)
		if err != nil {
			p.fail(fmt.Sprintf("%s[%d]", path, i), "pattern %q: %v", s, err)
			continue
		}
		out = append(out, re)
	}
	return out
}

func (p *recipeParser) recipe(v any) *Recipe {
	r := &Recipe{}
	o, ok := p.fields("recipe", v, []string{"sources"}, "metadata")
	if !ok {
		return r
	}
	if sv, ok := o.vals["sources"]; ok {
		list, ok := sv.([]any)
		switch {
		case !ok:
			p.fail("sources", "want an array of sources, got %s", kind(sv))
		case len(list) == 0:
			p.fail("sources", "no sources")
		}
		for i, e := range list {
			r.Sources = append(r.Sources, p.source(fmt.Sprintf("sources[%d]", i), e))
		}
	}
	if mv, ok := o.vals["metadata"]; ok {
		mo, ok := mv.(*object)
		if !ok {
			p.fail("metadata", "want an object of strings, got %s", kind(mv))
		} else {
			r.Metadata = map[string]string{}
			for _, k := range mo.keys {
				if s, ok := p.str(joinPath("metadata", k), mo.vals[k]); ok {
					r.Metadata[k] = s
				}
			}
		}
	}
	return r
}

func (p *recipeParser) source(path string, v any) Source {
	var s Source
	o, ok := p.fields(path, v, []string{"path", "include"}, "exclude", "prefix", "strip_prefix", "rename")
	if !ok {
		return s
	}
	if x, ok := o.vals["path"]; ok {
		if s.Path, ok = p.str(path+".path", x); ok && s.Path == "" {
			p.fail(path+".path", "empty path")
		}
	}
	if x, ok := o.vals["include"]; ok {
		s.Include = p.strings(path+".include", x)
		if _, isList := x.([]any); isList && len(s.Include) == 0 && len(x.([]any)) == 0 {
			p.fail(path+".include", "empty: list at least one pattern (\".*\" takes every tensor)")
		}
		s.include = p.patterns(path+".include", s.Include)
	}
	if x, ok := o.vals["exclude"]; ok {
		s.Exclude = p.strings(path+".exclude", x)
		s.exclude = p.patterns(path+".exclude", s.Exclude)
	}
	if x, ok := o.vals["prefix"]; ok {
		s.Prefix, _ = p.str(path+".prefix", x)
	}
	if x, ok := o.vals["strip_prefix"]; ok {
		s.StripPrefix, _ = p.str(path+".strip_prefix", x)
	}
	if x, ok := o.vals["rename"]; ok {
		list, ok := x.([]any)
		if !ok {
			p.fail(path+".rename", "want an array of [pattern, replacement] pairs, got %s", kind(x))
		}
		for i, e := range list {
			ep := fmt.Sprintf("%s.rename[%d]", path, i)
			pair, ok := e.([]any)
			if !ok || len(pair) != 2 {
				p.fail(ep, "want a [pattern, replacement] pair of strings, got %s", describeLen(e))
				continue
			}
			pat, ok1 := p.str(ep+"[0]", pair[0])
			rep, ok2 := p.str(ep+"[1]", pair[1])
			if !ok1 || !ok2 {
				continue
			}
			if len(s.Rename) >= maxRenames {
				p.fail(ep, "more than %d renames", maxRenames)
				break
			}
			if len(rep) > MaxOutputName {
				p.fail(ep+"[1]", "replacement of %d bytes is longer than a name may be (%d)", len(rep), MaxOutputName)
				continue
			}
			re, err := regexp.Compile(pat)
			if err != nil {
				p.fail(ep+"[0]", "pattern %q: %v", pat, err)
				continue
			}
			s.Rename = append(s.Rename, Rename{Pattern: pat, Replace: rep, re: re})
		}
	}
	return s
}

func describeLen(v any) string {
	if l, ok := v.([]any); ok {
		return fmt.Sprintf("an array of %d values", len(l))
	}
	return kind(v)
}

// resolve returns the source's path as opened: relative to the recipe's directory.
func (r *Recipe) resolve(s *Source) string {
	if filepath.IsAbs(s.Path) || r.File == "" {
		return s.Path
	}
	return filepath.Join(filepath.Dir(r.File), s.Path)
}

// Selects reports whether the source takes the tensor name: some include
// pattern matches and no exclude pattern does (unanchored searches).
func (s *Source) Selects(name string) bool {
	for _, re := range s.exclude {
		if re.MatchString(name) {
			return false
		}
	}
	for _, re := range s.include {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// MaxOutputName is the longest output tensor name a recipe may make, in
// bytes: far above any real name (GGUF readers stop at 64 to 160), low
// enough that renames which double a name each step stop at once.
const MaxOutputName = 4096

// maxRenames bounds the renames of one source; with names and
// replacements bounded by MaxOutputName it bounds the work per tensor.
const maxRenames = 256

// OutputName maps a source tensor name to its output name: strip_prefix
// (when the name has it), then every rename in order, then prefix. A name
// that would grow beyond MaxOutputName bytes is an error naming the rename.
func (s *Source) OutputName(name string) (string, error) {
	in := name
	name = strings.TrimPrefix(name, s.StripPrefix)
	for i, r := range s.Rename {
		var ok bool
		if name, ok = replaceBounded(r.re, name, r.Replace, MaxOutputName); !ok {
			return "", fmt.Errorf("tensor %q: rename[%d] makes a name longer than %d bytes", in, i, MaxOutputName)
		}
	}
	if len(s.Prefix)+len(name) > MaxOutputName {
		return "", fmt.Errorf("tensor %q: output name is longer than %d bytes", in, MaxOutputName)
	}
	return s.Prefix + name, nil
}

// replaceBounded is re.ReplaceAllString(name, tmpl), built match by match
// so that it stops (false) as soon as the result passes limit bytes.
func replaceBounded(re *regexp.Regexp, name, tmpl string, limit int) (string, bool) {
	var out []byte
	last := 0
	for _, m := range re.FindAllStringSubmatchIndex(name, -1) {
		out = append(out, name[last:m[0]]...)
		out = re.ExpandString(out, tmpl, name, m)
		last = m[1]
		if len(out) > limit {
			return "", false
		}
	}
	out = append(out, name[last:]...)
	return string(out), len(out) <= limit
}

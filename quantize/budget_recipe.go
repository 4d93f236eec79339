package quantize

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/mix"
)

// Recipe is the type of every eligible tensor of one output, in plan
// order: what --dry-run of a budget writes out for others to reuse.
type Recipe []RecipeEntry

// RecipeEntry is one tensor's type in a Recipe.
type RecipeEntry struct {
	Name string
	Type formats.DType
}

// Recipe returns the budget's choice as a Recipe (nil without a budget).
func (r *Report) Recipe() Recipe {
	if r.Budget == nil {
		return nil
	}
	out := make(Recipe, len(r.Budget.Tensors))
	for i, t := range r.Budget.Tensors {
		out[i] = RecipeEntry{Name: t.Name, Type: t.Type}
	}
	return out
}

// Rules returns the recipe as --tensor-type-rules text (sd.cpp's syntax,
// the first match wins): one anchored, escaped pattern per tensor.
func (rc Recipe) Rules() string {
	items := make([]string, len(rc))
	for i, e := range rc {
		items[i] = "^" + regexp.QuoteMeta(e.Name) + "$=" + e.Type.String()
	}
	return strings.Join(items, ",")
}

// WriteTypeFile writes the recipe as a llama.cpp --tensor-type-file: one
// NAME=TYPE per line. llama-quantize lower-cases each name, searches it as
// a regular expression in every tensor name and takes the first match, so
// a name that occurs inside a longer one listed later is written anchored
// (^NAME$) to keep it from claiming that tensor.
func (rc Recipe) WriteTypeFile(w io.Writer) error {
	bw := bufio.NewWriter(w)
	lower := make([]string, len(rc)) // once, not once per pair
	for i, e := range rc {
		lower[i] = strings.ToLower(e.Name)
	}
	for i, e := range rc {
		name := e.Name
		for _, later := range lower[i+1:] {
			if strings.Contains(later, lower[i]) {
				name = "^" + regexp.QuoteMeta(e.Name) + "$"
				break
			}
		}
		if strings.ContainsAny(name, " \t\r\n") {
			return option.Errorf("tensor %q: a name with white space cannot go into a %s", e.Name, option.Name("TensorTypeFile"))
		}
		fmt.Fprintf(bw, "%s=%s\n", name, e.Type)
	}
	return bw.Flush()
}

// Bounds on a --tensor-type-file, whose cost is items times tensors: far
// above any model's tensor count (a few thousand), far below what takes
// minutes and gigabytes (400,000 items did).
const (
	// maxTypeFileItems bounds the NAME=TYPE items.
	maxTypeFileItems = 1 << 16
	// maxTypeFilePatterns bounds the items that are not a tensor's exact
	// name, each searched in every tensor's name.
	maxTypeFilePatterns = 4096
)

// typeFileEntry is one NAME=TYPE of a --tensor-type-file.
type typeFileEntry struct {
	name string
	re   *regexp.Regexp
	typ  formats.DType
}

// readTypeFile reads a llama.cpp --tensor-type-file: NAME=TYPE items
// separated by white space (no comments, as llama-quantize reads it).
// A NAME matches a tensor of exactly that name, or else, as a regular
// expression searched in the name, as llama-quantize matches it; the first
// matching item wins.
func readTypeFile(path string) ([]typeFileEntry, error) {
	data, err := formats.ReadRegular(path, formats.MaxTextFile)
	if err != nil {
		return nil, option.Errorf("%s: %w", option.Name("TensorTypeFile"), err)
	}
	return parseTypeFile(path, data)
}

// parseTypeFile parses the contents of a --tensor-type-file named path.
func parseTypeFile(path string, data []byte) ([]typeFileEntry, error) {
	// A binary file given by mistake would otherwise be quoted whole in the
	// first error; say what it is instead.
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		return nil, fmt.Errorf("%s: not a text file of NAME=TYPE items", path)
	}
	items := strings.Fields(string(data))
	if len(items) > maxTypeFileItems {
		return nil, fmt.Errorf("%s: %d items; a type file may have at most %d (one per tensor)", path, len(items), maxTypeFileItems)
	}
	var out []typeFileEntry
	for n, item := range items {
		i := strings.LastIndexByte(item, '=')
		if i <= 0 || i == len(item)-1 {
			return nil, fmt.Errorf("%s: item %d %q: want NAME=TYPE", path, n+1, shortItem(item))
		}
		t, err := parseGGMLRuleType(item[i+1:])
		if err != nil {
			return nil, fmt.Errorf("%s: item %d %q: %v", path, n+1, shortItem(item), err)
		}
		re, err := pipeline.CompilePattern(item[:i])
		if err != nil {
			return nil, fmt.Errorf("%s: item %d %q: %v", path, n+1, shortItem(item), err)
		}
		out = append(out, typeFileEntry{name: item[:i], re: re, typ: t})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no NAME=TYPE items", path)
	}
	return out, nil
}

// anchoredName returns the tensor name an item written by WriteTypeFile
// as "^QUOTED$" stands for, or "" when the item is not of that form.
func anchoredName(p string) string {
	inner, ok1 := strings.CutPrefix(p, "^")
	inner, ok2 := strings.CutSuffix(inner, "$")
	if !ok1 || !ok2 {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		if inner[i] == '\\' && i+1 < len(inner) {
			i++
		}
		b.WriteByte(inner[i])
	}
	if regexp.QuoteMeta(b.String()) != inner {
		return ""
	}
	return b.String()
}

// shortItem cuts an item quoted in an error to a length a terminal line
// holds.
func shortItem(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// recipeOverride returns the override --tensor-type-file or --types-from
// gives (nil when neither is set), checked against the input's tensors.
func (b *builder) recipeOverride() (mix.Override, error) {
	switch {
	case b.opts.TensorTypeFile != "":
		entries, err := readTypeFile(b.opts.TensorTypeFile)
		if err != nil {
			return nil, err
		}
		exact := map[string]formats.DType{}
		for _, e := range entries {
			key := e.name
			if a := anchoredName(e.name); a != "" {
				key = a // WriteTypeFile's "^NAME$", a name that is inside a later one
			}
			if _, dup := exact[key]; !dup {
				exact[key] = e.typ
			}
		}
		tensors := make(map[string]bool, len(b.dm.Sources))
		names := make([]string, len(b.dm.Sources))
		for i, s := range b.dm.Sources {
			names[i] = s.Name
			tensors[s.Name] = true
		}
		var patterns []typeFileEntry
		for _, e := range entries {
			if !tensors[e.name] && !tensors[anchoredName(e.name)] { // else it matches its tensor
				patterns = append(patterns, e)
			}
		}
		if len(patterns) > maxTypeFilePatterns {
			return nil, fmt.Errorf("%s: %d items are patterns rather than tensor names, at most %d: each is searched in every tensor's name",
				b.opts.TensorTypeFile, len(patterns), maxTypeFilePatterns)
		}
		// An anchored name matches its tensor alone, which the map finds.
		searched := slices.DeleteFunc(slices.Clone(entries), func(e typeFileEntry) bool { return anchoredName(e.name) != "" })
		var unmatched []string
		for _, e := range patterns {
			if !slices.ContainsFunc(names, e.re.MatchString) {
				unmatched = append(unmatched, e.name+"="+e.typ.String())
			}
		}
		if len(unmatched) > 0 {
			// One line for all of them: a file of many stale items would
			// otherwise print a line each.
			w := fmt.Sprintf("%s: %s no tensor of %s (first %s)", b.opts.TensorTypeFile,
				pipeline.Count(len(unmatched), "item matches", "items match"), b.opts.Input, unmatched[0])
			b.log.Warn(w)
			b.res.Warnings = append(b.res.Warnings, w)
		}
		return func(name string) (formats.DType, bool) {
			if t, ok := exact[name]; ok {
				return t, true
			}
			for _, e := range searched {
				if e.re.MatchString(name) {
					return e.typ, true
				}
			}
			return 0, false
		}, nil
	case b.opts.TypesFrom != "":
		return b.typesFrom(b.opts.TypesFrom)
	}
	return nil, nil
}

// typesFrom reads another GGUF's type per tensor name and refuses a file
// whose tensor names are not the input's.
func (b *builder) typesFrom(path string) (mix.Override, error) {
	if pipeline.SameFile(path, b.opts.Output) {
		return nil, option.Errorf("%s %s is the output", option.Name("TypesFrom"), path)
	}
	m, err := formats.Open(path)
	if err != nil {
		return nil, option.Errorf("%s: %w", option.Name("TypesFrom"), err)
	}
	defer m.Close()
	if f := m.Info().Format; f != "gguf" {
		return nil, option.Errorf("%s %s: want a GGUF file, this is %s", option.Name("TypesFrom"), path, f)
	}
	types := map[string]formats.DType{}
	for _, t := range m.Tensors() {
		types[t.Name] = t.Type
	}
	have := map[string]bool{}
	var missing, extra []string
	for _, s := range b.dm.Sources {
		have[s.Name] = true
		// GGUF outputs leave out position_ids (positionIDs), so a file
		// written by an earlier version may still hold one: neither counts.
		if _, ok := types[s.Name]; !ok && s.Tensor.Type.IsGGML() && !positionIDs(s) {
			missing = append(missing, s.Name)
		}
	}
	for _, t := range m.Tensors() {
		if !have[t.Name] && !strings.HasSuffix(t.Name, "embeddings.position_ids") {
			extra = append(extra, t.Name)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		var parts []string
		if len(missing) > 0 {
			parts = append(parts, fmt.Sprintf("%s of %s not in it (first %q)", pipeline.Count(len(missing), "tensor", "tensors"), b.opts.Input, missing[0]))
		}
		if len(extra) > 0 {
			parts = append(parts, fmt.Sprintf("%s of its own not in %s (first %q)", pipeline.Count(len(extra), "tensor", "tensors"), b.opts.Input, extra[0]))
		}
		return nil, option.Errorf("%s %s: tensor names differ from the input's: %s; the type map can only be copied between files with the same tensors", option.Name("TypesFrom"), path, strings.Join(parts, ", "))
	}
	for name, t := range types {
		if !t.IsGGML() || !t.InLinkedGGML() {
			return nil, option.Errorf("%s %s: tensor %q: type %s cannot be written", option.Name("TypesFrom"), path, name, t)
		}
	}
	return func(name string) (formats.DType, bool) {
		t, ok := types[name]
		return t, ok
	}, nil
}

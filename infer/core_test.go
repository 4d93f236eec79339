package infer_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/infer"
)

// coreFiles are the engine core, every non-test file of package infer:
// Load and Generate through the registries, weight loading, sampling,
// schedules, noise and graph helpers. A family lives in its package under
// infer/arch, a text encoder kind under infer/encoder, a VAE kind under
// infer/vae, and registers itself; the core names none of them, so that
// adding one never edits these files.
func coreFiles(t *testing.T) []string {
	all, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range all {
		if !strings.HasSuffix(f, "_test.go") {
			files = append(files, f)
		}
	}
	if len(files) < 10 {
		t.Fatalf("core files %q: run from the package directory", files)
	}
	return files
}

// familyWords are the names the core must not use: the families generate
// runs (the family table's IDs), the engine parts the family entries name
// (networks, conditioners, schedules other than the core's own, text
// encoder and VAE kinds) and the component flags of their encoders.
func familyWords() []string {
	words := map[string]bool{}
	for _, id := range family.Generators() {
		words[id] = true
	}
	for _, f := range infer.Families {
		words[f.Network], words[f.Conditioner], words[f.VAE.Kind] = true, true, true
		if f.Schedule != "discrete" && f.Schedule != "discrete-flow" { // the core's DDPM and shifted flow schedules
			words[f.Schedule] = true
		}
		for _, e := range f.Encoders {
			words[e.Kind], words[e.Component] = true, true
		}
	}
	var out []string
	for w := range words {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// namesFamily returns the family word s contains as a word of its own: in
// a string between non-letters, in an identifier also at a change of case
// ("dmPrefix", "detectCLIP").
func namesFamily(s string, ident bool, words []string) string {
	lower := strings.ToLower(s)
	for _, w := range words {
		for i := 0; ; {
			j := strings.Index(lower[i:], w)
			if j < 0 {
				break
			}
			j += i
			end := j + len(w)
			if boundary(s, j, ident, true) && boundary(s, end, ident, false) {
				return w
			}
			i = j + 1
		}
	}
	return ""
}

// boundary reports whether position i of s starts (start) or ends a word.
func boundary(s string, i int, ident, start bool) bool {
	if i == 0 || i == len(s) {
		return true
	}
	letter := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	upper := func(c byte) bool { return c >= 'A' && c <= 'Z' }
	a, b := s[i-1], s[i]
	if !letter(a) || !letter(b) {
		return true
	}
	// "dmPrefix": a lower-case letter then an upper-case one.
	return ident && !upper(a) && upper(b)
}

// TestCoreNamesNoFamily holds the plug-in rule: no identifier or string
// literal in the core's files names a family or one of its parts.
func TestCoreNamesNoFamily(t *testing.T) {
	words := familyWords()
	if len(words) < 5 {
		t.Fatalf("family words %q: the table or the registries are empty", words)
	}
	fset := token.NewFileSet()
	for _, name := range coreFiles(t) {
		f, err := parser.ParseFile(fset, filepath.Join(".", name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.Ident:
				if w := namesFamily(x.Name, true, words); w != "" {
					t.Errorf("%s: identifier %s names %q", fset.Position(x.Pos()), x.Name, w)
				}
			case *ast.BasicLit:
				if x.Kind == token.STRING {
					v, _ := strconv.Unquote(x.Value)
					if w := namesFamily(v, false, words); w != "" {
						t.Errorf("%s: string %s names %q", fset.Position(x.Pos()), x.Value, w)
					}
				}
			}
			return true
		})
	}
}

// The rule's word matcher: whole words only, camel case in identifiers.
func TestNamesFamily(t *testing.T) {
	words := []string{"clip", "unet", "t5"}
	for _, c := range []struct {
		s     string
		ident bool
		want  string
	}{
		{"unetPrefix", true, "unet"},
		{"detectCLIP", true, "clip"},
		{"clipped", true, ""},
		{"clip_l", false, "clip"},
		{"a clip", false, "clip"},
		{"t5xxl", false, "t5"},
		{"eclipse", false, ""},
	} {
		if got := namesFamily(c.s, c.ident, words); got != c.want {
			t.Errorf("namesFamily(%q, %v) = %q, want %q", c.s, c.ident, got, c.want)
		}
	}
}

package layering

import (
	"fmt"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// module is the module path the table's package paths are relative to.
const module = "github.com/sdtool/sdtool"

// layers is the package map of docs/design.md, lowest first: a package may
// import packages of lower layers only, never one of its own layer or
// above. A path ending
// in "/*" stands for every package below it (not the package itself), so
// that the subpackages of infer and native (infer/metrics,
// native/ggmltest, ...) need no row of their own.
var layers = []struct {
	name string
	pkgs []string
}{
	{"process facts", []string{"internal/procmem"}},
	{"leaves", []string{"internal/splitmix", "internal/peakrss", "internal/longtest", "internal/workpool", "internal/option"}},
	{"vocabulary", []string{"formats"}},
	{"containers", []string{"formats/gguf", "formats/safetensors", "formats/ckpt", "formats/comfyquant", "internal/memmodel"}},
	{"folders of containers", []string{"formats/diffusers"}},
	{"model families (data)", []string{"family"}},
	{"codecs, names, tokenizers and ggml", []string{"quant", "names", "text", "native"}},
	{"codec policies and ggml-backed codecs", []string{"quant/mix", "quant/imatrix", "convrot", "native/*"}},
	{"any tensor as float32", []string{"tensor"}},
	{"adapters (LoRA and its kin) over a base's tensors", []string{"lora"}},
	{"the writing engine", []string{"pipeline"}},
	{"parts of inference", []string{"infer/metrics", "infer/pngtext", "infer/avi"}},
	{"generate's engine core", []string{"infer"}},
	{"text encoder and VAE kinds", []string{"infer/encoder/*", "infer/vae/*"}},
	{"the family whose blocks other DiTs share", []string{"infer/arch/flux"}},
	{"model families", []string{"infer/arch/*"}},
	{"every family, and the engine's test kit", []string{"infer/families", "infer/internal/*"}},
	{"commands", []string{"convert", "quantize", "merge", "inspect", "internal/synth", "report"}},
	{"command support", []string{"cmd/sdtool/internal/*", "internal/benchutil", "internal/layering", "report/*"}},
	{"programs", []string{"cmd/sdtool", "internal/synth/cmd/*"}},
}

// siblings are packages that must never import each other, named in the
// error when one does (the layer rule forbids it too; this says why).
var siblings = []string{"convert", "quantize", "merge"}

// cgoHome is where import "C" may appear.
const cgoHome = "native"

// pkg is one package of the tree: its module-relative path, the module
// packages it imports (from every non-test file, whatever its build tags)
// whether it imports "C", and whether it imports the standard library's
// testing package.
type pkg struct {
	path    string
	imports []string
	cgo     bool
	testing bool
}

// layerOf returns the layer of a package path, or -1 when the table has no
// row for it.
func layerOf(path string) int {
	best, bestLen := -1, -1
	for i, l := range layers {
		for _, p := range l.pkgs {
			switch {
			case p == path:
				return i
			case strings.HasSuffix(p, "/*") && strings.HasPrefix(path, strings.TrimSuffix(p, "*")) && len(p) > bestLen:
				best, bestLen = i, len(p)
			}
		}
	}
	return best
}

// check returns every violation of the map in the graph, sorted.
func check(graph []pkg) []string {
	var bad []string
	for _, p := range graph {
		from := layerOf(p.path)
		if p.cgo && p.path != cgoHome && !strings.HasPrefix(p.path, cgoHome+"/") {
			bad = append(bad, fmt.Sprintf("%s imports \"C\": cgo belongs in %s/ only", p.path, cgoHome))
		}
		if from < 0 {
			if len(p.imports) > 0 {
				bad = append(bad, fmt.Sprintf("%s is not on the map: give it a row in the layering table (it imports %s)", p.path, strings.Join(p.imports, ", ")))
			}
			continue // a leaf can sit anywhere
		}
		for _, imp := range p.imports {
			to := layerOf(imp)
			switch {
			case isSibling(p.path) && isSibling(imp):
				bad = append(bad, fmt.Sprintf("%s imports %s: %s must not import each other", p.path, imp, strings.Join(siblings, ", ")))
			case to >= from:
				what := "its own layer"
				if to > from {
					what = "a higher layer"
				}
				bad = append(bad, fmt.Sprintf("%s (%s) imports %s (%s), %s", p.path, layers[from].name, imp, layers[to].name, what))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func isSibling(path string) bool {
	for _, s := range siblings {
		if s == path {
			return true
		}
	}
	return false
}

// TestImportsPointDown reads the import graph of the whole module from the
// source (every non-test file, so cgo and !cgo variants alike) and fails on
// any import that does not point down the map.
func TestImportsPointDown(t *testing.T) {
	graph, err := readGraph(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(graph) < 20 {
		t.Fatalf("read only %d packages; is the module root right?", len(graph))
	}
	for _, v := range check(graph) {
		t.Error(v)
	}
	// Every row names a package that exists, so that the table does not rot.
	have := map[string]bool{}
	for _, p := range graph {
		have[p.path] = true
	}
	for _, l := range layers {
		for _, p := range l.pkgs {
			if !strings.HasSuffix(p, "/*") && !have[p] {
				t.Errorf("the layering table names %s, which has no package", p)
			}
		}
	}
}

// The checker itself: each kind of violation is caught, and a graph that
// follows the map passes.
func TestCheckFindsViolations(t *testing.T) {
	good := []pkg{
		{path: "formats"},
		{path: "formats/gguf", imports: []string{"formats"}},
		{path: "pipeline", imports: []string{"formats", "tensor"}},
		{path: "text", imports: []string{"formats"}},
		{path: "infer", imports: []string{"text", "native"}},
		{path: "native", imports: []string{"formats"}, cgo: true},
		{path: "native/ggmltest", imports: []string{"native", "quant"}, cgo: true},
		{path: "pngtext"}, // an unknown leaf is tolerated
	}
	if v := check(good); len(v) != 0 {
		t.Errorf("a graph that follows the map: %q", v)
	}
	for _, c := range []struct {
		p    pkg
		want string
	}{
		{pkg{path: "tensor", imports: []string{"pipeline"}}, "a higher layer"},
		{pkg{path: "quant", imports: []string{"names"}}, "its own layer"},
		{pkg{path: "quantize", imports: []string{"convert"}}, "must not import each other"},
		{pkg{path: "text", imports: []string{"infer"}}, "a higher layer"},
		{pkg{path: "pipeline", cgo: true}, "cgo belongs in native/"},
		{pkg{path: "unmapped", imports: []string{"formats"}}, "not on the map"},
	} {
		v := check([]pkg{c.p})
		if len(v) != 1 || !strings.Contains(v[0], c.want) {
			t.Errorf("%+v: %q, want one violation saying %q", c.p, v, c.want)
		}
	}
}

// shipped is the program users run; test support must stay out of it.
const shipped = "cmd/sdtool"

// testSupport are the module's packages made for tests alone.
var testSupport = []string{"internal/synth", "internal/benchutil", "internal/peakrss", "internal/layering", "internal/memmodel"}

// linkedTestSupport follows the imports of root through the graph (every
// non-test file whatever its build tags, so it over-approximates `go list
// -deps`) and names each package on the way that imports testing or is
// test support, with the chain of imports that reaches it.
func linkedTestSupport(graph []pkg, root string) []string {
	byPath := map[string]pkg{}
	for _, p := range graph {
		byPath[p.path] = p
	}
	via := map[string]string{root: ""}
	queue := []string{root}
	var bad []string
	chain := func(p string) string {
		parts := []string{p}
		for q := via[p]; q != ""; q = via[q] {
			parts = append([]string{q}, parts...)
		}
		return strings.Join(parts, " -> ")
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		p := byPath[cur]
		if p.testing {
			bad = append(bad, chain(cur)+" imports testing")
		} else if contains(testSupport, cur) {
			bad = append(bad, chain(cur)+" is test support")
		}
		for _, imp := range p.imports {
			if _, seen := via[imp]; !seen {
				via[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// TestShippedBinaryLinksNoTestSupport holds that the sdtool binary links
// neither the testing package nor the synthetic-model generator and other
// test helpers (what `go list -deps ./cmd/sdtool` would show).
func TestShippedBinaryLinksNoTestSupport(t *testing.T) {
	graph, err := readGraph(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range linkedTestSupport(graph, shipped) {
		t.Error(v)
	}
	// The walk itself: a chain through a helper is caught and named.
	bad := linkedTestSupport([]pkg{
		{path: "cmd/x", imports: []string{"infer"}},
		{path: "infer", imports: []string{"internal/benchutil"}},
		{path: "internal/benchutil", imports: []string{"internal/synth"}, testing: true},
		{path: "internal/synth"},
	}, "cmd/x")
	want := []string{"cmd/x -> infer -> internal/benchutil -> internal/synth is test support", "cmd/x -> infer -> internal/benchutil imports testing"}
	if strings.Join(bad, "|") != strings.Join(want, "|") {
		t.Errorf("linkedTestSupport = %q, want %q", bad, want)
	}
}

// moduleRoot finds the directory of go.mod above this package.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}

// readGraph parses the imports of every non-test Go file below root,
// skipping testdata, hidden directories and files built only with the
// "ignore" tag (generators run by hand).
func readGraph(root string) ([]pkg, error) {
	byDir := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			if cg.Pos() >= f.Package {
				break
			}
			for _, c := range cg.List {
				if expr, err := constraint.Parse(c.Text); err == nil && expr.String() == "ignore" {
					return nil
				}
			}
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		p := byDir[rel]
		if p == nil {
			p = &pkg{path: rel}
			byDir[rel] = p
		}
		for _, spec := range f.Imports {
			ip, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if ip == "C" {
				p.cgo = true
			}
			if ip == "testing" {
				p.testing = true
			}
			if rest, ok := strings.CutPrefix(ip, module+"/"); ok && !contains(p.imports, rest) {
				p.imports = append(p.imports, rest)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []pkg
	for _, p := range byDir {
		sort.Strings(p.imports)
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// designDoc is the repository's design document, whose package map must be
// the table above.
const designDoc = "docs/design.md"

// TestDesignDocHoldsTheMap reads the package map between the layers
// markers of docs/design.md ("name: pkg, pkg" per line, lowest first) and
// fails when it differs from the table.
func TestDesignDocHoldsTheMap(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), designDoc))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "<!-- layers: begin -->")
	block, _, ok2 := strings.Cut(rest, "<!-- layers: end -->")
	if !ok || !ok2 {
		t.Fatalf("%s: no <!-- layers: begin --> ... <!-- layers: end --> block", designDoc)
	}
	var doc []string
	for line := range strings.Lines(block) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "```") {
			continue
		}
		// The layer's name may hold colons of its own: the packages follow the last one.
		i := strings.LastIndex(line, ":")
		if i < 0 {
			t.Fatalf("%s: map line %q has no \"name: packages\"", designDoc, line)
		}
		var pkgs []string
		for _, p := range strings.Split(line[i+1:], ",") {
			pkgs = append(pkgs, strings.TrimSpace(p))
		}
		doc = append(doc, strings.TrimSpace(line[:i])+": "+strings.Join(pkgs, ", "))
	}
	var table []string
	for _, l := range layers {
		table = append(table, l.name+": "+strings.Join(l.pkgs, ", "))
	}
	if strings.Join(doc, "\n") != strings.Join(table, "\n") {
		t.Errorf("%s's package map differs from the layering table:\n%s\nwant:\n%s", designDoc, strings.Join(doc, "\n"), strings.Join(table, "\n"))
	}
}

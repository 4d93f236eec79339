package native

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTwinAPI checks that the files built with cgo and their !cgo twins
// declare the same exported API (names and signatures), so that code which
// builds against one builds against the other. It reads the sources, so it
// runs, and checks both sides, in either build.
func TestTwinAPI(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	withCgo, without := map[string]string{}, map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		inCgo, inNoCgo := buildsIn(t, f, true), buildsIn(t, f, false)
		if inCgo == inNoCgo {
			continue // shared by both builds
		}
		side := withCgo
		if inNoCgo {
			side = without
		}
		for _, decl := range exported(f) {
			side[decl] = name
		}
	}
	if len(withCgo) == 0 || len(without) == 0 {
		t.Fatalf("found %d cgo and %d !cgo declarations; the test reads the wrong files", len(withCgo), len(without))
	}
	for _, d := range sortedKeys(withCgo) {
		if _, ok := without[d]; !ok {
			t.Errorf("%s: %s has no !cgo twin", withCgo[d], d)
		}
	}
	for _, d := range sortedKeys(without) {
		if _, ok := withCgo[d]; !ok {
			t.Errorf("%s: %s exists only without cgo", without[d], d)
		}
	}
}

// buildsIn reports whether f is compiled when cgo is (or is not) enabled.
func buildsIn(t *testing.T, f *ast.File, cgo bool) bool {
	for _, cg := range f.Comments {
		if cg.Pos() >= f.Package {
			break
		}
		for _, c := range cg.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				t.Fatal(err)
			}
			return expr.Eval(func(tag string) bool { return tag == "cgo" && cgo || tag != "cgo" })
		}
	}
	return true
}

// exported lists f's exported declarations as "func (T) Name(types) types",
// "type Name", "const Name" and "var Name".
func exported(f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			recv := ""
			if d.Recv != nil {
				recv = "(" + fieldTypes(d.Recv) + ") "
			}
			out = append(out, "func "+recv+d.Name.Name+"("+fieldTypes(d.Type.Params)+") ("+fieldTypes(d.Type.Results)+")")
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						out = append(out, "type "+s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							out = append(out, d.Tok.String()+" "+n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// fieldTypes prints a parameter list's types without their names.
func fieldTypes(fl *ast.FieldList) string {
	if fl == nil {
		return ""
	}
	var ts []string
	for _, f := range fl.List {
		for range max(len(f.Names), 1) {
			ts = append(ts, types.ExprString(f.Type))
		}
	}
	return strings.Join(ts, ", ")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package family

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	sdnames "github.com/sdtool/sdtool/names"
)

var update = flag.Bool("update", false, "rewrite the generated table in ../docs/families.md")

const (
	docPath  = "../docs/families.md"
	docBegin = "<!-- BEGIN family table (go test ./family -update) -->\n"
	docEnd   = "<!-- END family table -->\n"
)

// docTable renders the family table as docs/families.md shows it.
func docTable() string {
	var b strings.Builder
	b.WriteString("| ID | family | kind | variants | ComfyUI-GGUF | sd.cpp | generate | kept in high precision (F32 marked) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	or := func(s string) string {
		if s == "" {
			return "—"
		}
		return "`" + s + "`"
	}
	for _, f := range Families {
		var vs []string
		seen := map[string]bool{}
		for _, r := range f.Detect {
			if r.Variant != "" && !seen[r.Variant] {
				seen[r.Variant] = true
				v := r.Variant
				if sd := f.SDCppFor(v); sd != f.SDCpp {
					if sd == "" {
						sd = "none"
					}
					v += " (sd.cpp: " + sd + ")"
				}
				vs = append(vs, v)
			}
		}
		var keep []string
		for _, k := range f.Keep {
			keep = append(keep, "`"+k+"`")
		}
		for _, k := range f.F32 {
			keep = append(keep, "`"+k+"` (F32)")
		}
		gen := "no"
		if f.Generate {
			gen = "**yes**"
		}
		kind := strings.ReplaceAll(f.Kind, "_", " ")
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", f.ID, f.Title, kind, strings.Join(vs, ", "),
			or(f.ComfyArch), or(f.SDCpp), gen, strings.Join(keep, ", "))
	}
	return b.String()
}

// TestFamiliesDoc holds docs/families.md's table to the family table.
func TestFamiliesDoc(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no generated table between %q and %q", docPath, docBegin, docEnd)
	}
	want := docTable()
	if got := doc[i+len(docBegin) : j]; got != want {
		if *update {
			if err := os.WriteFile(docPath, []byte(doc[:i+len(docBegin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s is out of date with the family table: run go test ./family -update", docPath)
	}
}

// TestSDCppNames: every sd.cpp version name in the table is one that the
// names package (which follows sd.cpp's SDVersion) knows, except the
// versions names does not model yet.
func TestSDCppNames(t *testing.T) {
	notModelled := map[string]bool{"ltxav": true, "minimax-h3": true}
	for _, f := range Families {
		vs := []string{""}
		for _, r := range f.Detect {
			vs = append(vs, r.Variant)
		}
		for _, v := range vs {
			sd := f.SDCppFor(v)
			if sd == "" || notModelled[sd] {
				continue
			}
			if _, err := sdnames.ParseVersion(sd); err != nil {
				t.Errorf("%s %q: sd.cpp name %q: %v", f.ID, v, sd, err)
			}
		}
	}
}

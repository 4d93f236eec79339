package family

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
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
		for _, k := range f.ModuleKeep {
			keep = append(keep, "`"+k+"` (float in INT8 modules)")
		}
		gen := "no"
		if f.Generate {
			gen = "**yes**"
		}
		kind := strings.ReplaceAll(f.Kind, "_", " ")
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", f.ID, f.Title, kind, strings.Join(vs, ", "),
			or(f.ComfyArch), or(f.SDCpp)+sdcppWhere(f), gen, strings.Join(keep, ", "))
	}
	return b.String()
}

// sdcppWhere renders the SDCppAt and SDCppNeeds columns for the sd.cpp
// column of docs/families.md.
func sdcppWhere(f *Family) string {
	if f.SDCpp == "" {
		return ""
	}
	quote := func(ps []string) string {
		q := make([]string, len(ps))
		for i, p := range ps {
			q[i] = "`" + p + "`"
			if p == "" {
				q[i] = "no prefix"
			}
		}
		return strings.Join(q, ", ")
	}
	var parts []string
	if f.SDCppAt != nil {
		parts = append(parts, "seen under "+quote(f.SDCppAt))
	}
	for _, n := range f.SDCppNeeds {
		switch {
		case n.Family != "" && len(n.Prefixes) == 1 && n.Prefixes[0] == "":
			parts = append(parts, "needs `"+n.Family+"` in the file")
		case n.Family != "":
			parts = append(parts, "needs `"+n.Family+"` under "+quote(n.Prefixes))
		default:
			parts = append(parts, "needs a text encoder under "+quote(n.Prefixes))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
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

package quantize

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/quant/mix"
)

var updateMixDoc = flag.Bool("update", false, "rewrite the generated mix table in ../docs/families.md")

const (
	mixDocPath  = "../docs/families.md"
	mixDocBegin = "<!-- BEGIN mix table (go test ./quantize -run TestMixDoc -update) -->\n"
	mixDocEnd   = "<!-- END mix table -->\n"
)

// docMixes are the mixes whose upgrades depend on the tensors' roles; the
// others give every eligible tensor their base type.
var docMixes = []string{"Q2_K", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q4_0", "Q5_0"}

// mixDocTable renders, for every family of the synthetic layouts, what
// each mix upgrades: the role (the Reason mix.Choose gives) and the types
// it gets, planned by mix.Choose on the layout's real tensor names, so
// that a family whose names match no role (Flux's FFN down) says so. The
// type is the upgrade's, also where a synthetic row is too narrow for it.
func mixDocTable(t *testing.T) string {
	type cell map[string][]string // reason -> types, in first-seen order
	rows := map[string]map[string]cell{}
	var order []string
	for _, c := range familyCases {
		if c.meta != nil {
			continue
		}
		tensors, err := synth.Descriptors(synth.Spec{Arch: c.layout, DType: formats.F16})
		if err != nil {
			t.Fatal(err)
		}
		arch := family.Detect(tensors, nil)
		inputs := make([]mix.Input, len(tensors))
		for i, ts := range tensors {
			inputs[i] = mix.Input{Name: ts.Name, Shape: ts.Shape, Source: ts.Type}
		}
		for _, name := range docMixes {
			f, err := mix.Parse(name)
			if err != nil {
				t.Fatal(err)
			}
			choices, err := mix.Choose(f, inputs, mix.Options{Arch: arch.Name, Layout: &arch})
			if err != nil {
				t.Fatalf("%s %s: %v", c.layout, name, err)
			}
			for i, ch := range choices {
				fam := arch.Of(tensors[i].Name)
				if fam == nil || !ch.Quantized || ch.Type == f.Base {
					continue
				}
				if rows[fam.ID] == nil {
					rows[fam.ID] = map[string]cell{}
					order = append(order, fam.ID)
				}
				why := upgradeRole(ch.Reason)
				if why == "" {
					continue // a row the type's block does not divide
				}
				if rows[fam.ID][name] == nil {
					rows[fam.ID][name] = cell{}
				}
				ty := ch.Type.String()
				if m := intended.FindStringSubmatch(ch.Reason); m != nil {
					ty = m[1] // the synthetic widths are not the real ones: say the upgrade, not the fallback
				}
				if !slices.Contains(rows[fam.ID][name][why], ty) {
					rows[fam.ID][name][why] = append(rows[fam.ID][name][why], ty)
				}
			}
		}
		for _, comp := range arch.Components {
			if rows[comp.Name] == nil {
				rows[comp.Name] = map[string]cell{}
				order = append(order, comp.Name)
			}
		}
	}
	var b strings.Builder
	b.WriteString("| family | " + strings.Join(docMixes, " | ") + " |\n|---|" + strings.Repeat("---|", len(docMixes)) + "\n")
	for _, id := range order {
		fmt.Fprintf(&b, "| `%s` |", id)
		for _, name := range docMixes {
			var parts []string
			c := rows[id][name]
			for _, why := range []string{"V projection", "fused qkv", "FFN down", "first/last block"} {
				if ts := c[why]; len(ts) > 0 {
					parts = append(parts, why+" "+strings.Join(ts, "/"))
				}
			}
			if len(parts) == 0 {
				parts = []string{"—"}
			}
			fmt.Fprintf(&b, " %s |", strings.Join(parts, ", "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// intended finds the upgrade's type in the Reason of a row it did not fit.
var intended = regexp.MustCompile(`does not fit (\S+): `)

// upgradeRole names the role of a mix upgrade from its Reason, "" for a
// type that is not an upgrade (a fallback for rows the block does not divide).
func upgradeRole(reason string) string {
	for _, r := range []string{"V projection", "fused qkv", "FFN down"} {
		if strings.Contains(reason, r) {
			return r
		}
	}
	if strings.Contains(reason, "first/last") {
		return "first/last block"
	}
	return ""
}

// TestMixDoc holds the generated mix table in docs/families.md to what the
// mixes do on each family's tensors (issue 34, item 13: the README's table
// promised q6_K FFN downs that Flux has none of).
func TestMixDoc(t *testing.T) {
	raw, err := os.ReadFile(mixDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, mixDocBegin), strings.Index(doc, mixDocEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no generated mix table between %q and %q", mixDocPath, mixDocBegin, mixDocEnd)
	}
	want := mixDocTable(t)
	if got := doc[i+len(mixDocBegin) : j]; got != want {
		if *updateMixDoc {
			if err := os.WriteFile(mixDocPath, []byte(doc[:i+len(mixDocBegin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s is out of date with the mixes: run go test ./quantize -run TestMixDoc -update", mixDocPath)
	}
}

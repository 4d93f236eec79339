package lora

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
)

// keyList is one file of testdata/keys.
type keyList struct {
	file    string
	bases   []string
	keys    []string
	shapes  map[string][]int64 // keys whose shape the source gives
	implied []string           // suffixes every module is completed with
	pairs   bool               // complete up/down pairs
	dora    bool               // the modules carry DoRA magnitudes
	refused bool               // the kind is refused
	expect  []expectation
}

type expectation struct {
	module string
	bias   bool
	base   string
	rows   [2]int64 // [0, 0]: whole tensor
}

func readKeyList(t *testing.T, path string) *keyList {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kl := &keyList{file: filepath.Base(path), shapes: map[string][]int64{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "@base "):
			kl.bases = strings.Fields(line)[1:]
		case strings.HasPrefix(line, "@implied "):
			kl.implied = append(kl.implied, strings.Fields(line)[1:]...)
		case line == "@implied_pairs":
			kl.pairs = true
		case line == "@dora":
			kl.dora = true
		case line == "@refused":
			kl.refused = true
		case strings.HasPrefix(line, "@expect "):
			lhs, rhs, ok := strings.Cut(strings.TrimPrefix(line, "@expect "), " -> ")
			if !ok {
				t.Fatalf("%s: bad expectation %q", path, line)
			}
			e := expectation{}
			lf, rf := strings.Fields(lhs), strings.Fields(rhs)
			e.module, e.bias = lf[0], len(lf) > 1 && lf[1] == "bias"
			e.base = rf[0]
			if len(rf) == 3 && rf[1] == "rows" {
				a, b, _ := strings.Cut(rf[2], ":")
				e.rows[0], _ = strconv.ParseInt(a, 10, 64)
				e.rows[1], _ = strconv.ParseInt(b, 10, 64)
			}
			kl.expect = append(kl.expect, e)
		case strings.HasPrefix(line, "@"):
			t.Fatalf("%s: unknown directive %q", path, line)
		default:
			name, shape, hasShape := strings.Cut(line, "\t")
			kl.keys = append(kl.keys, name)
			if hasShape {
				var s []int64
				if shape != "-" {
					for _, d := range strings.Split(shape, ",") {
						n, err := strconv.ParseInt(d, 10, 64)
						if err != nil {
							t.Fatalf("%s: bad shape %q", path, line)
						}
						s = append(s, n)
					}
				}
				kl.shapes[name] = s
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return kl
}

// complete adds the keys the directives imply.
func (kl *keyList) complete(t *testing.T) []string {
	have := map[string]bool{}
	for _, k := range kl.keys {
		have[k] = true
	}
	out := append([]string{}, kl.keys...)
	add := func(k string) {
		if !have[k] {
			have[k] = true
			out = append(out, k)
		}
	}
	var modules []string
	seen := map[string]bool{}
	for _, k := range kl.keys {
		m, _, ok := ParseKey(k)
		if !ok {
			if kl.refused {
				continue
			}
			t.Fatalf("%s: key %q has no adapter suffix", kl.file, k)
		}
		if !seen[m] {
			seen[m] = true
			modules = append(modules, m)
		}
	}
	for _, m := range modules {
		for _, s := range kl.implied {
			add(m + "." + s)
		}
	}
	if kl.pairs {
		partners := [][2]string{{".lora_up.weight", ".lora_down.weight"}, {".lora_B.weight", ".lora_A.weight"},
			{"_lora.up.weight", "_lora.down.weight"}, {".lora_linear_layer.up.weight", ".lora_linear_layer.down.weight"}}
		for _, k := range kl.keys {
			for _, p := range partners {
				if m, ok := strings.CutSuffix(k, p[0]); ok {
					add(m + p[1])
				}
				if m, ok := strings.CutSuffix(k, p[1]); ok {
					add(m + p[0])
				}
			}
		}
		// A module seen only by its alpha gets its factors too.
		for _, k := range kl.keys {
			if m, ok := strings.CutSuffix(k, ".alpha"); ok && !have[m+".lora_up.weight"] && !have[m+".lora_B.weight"] {
				add(m + ".lora_up.weight")
				add(m + ".lora_down.weight")
			}
		}
	}
	return out
}

// factorShapes makes factor shapes that fit a base tensor of shape shape
// (rows rows of it), for keys whose shapes the source does not give.
func factorShapes(role Role, shape []int64, rows int64, conv bool) []int64 {
	const r = 4
	inner := shape[1:]
	cols := prod(inner)
	kern := []int64{}
	if conv {
		kern = inner[1:]
	}
	switch role {
	case RoleUp:
		if conv {
			return []int64{rows, r, 1, 1}
		}
		return []int64{rows, r}
	case RoleDown:
		return append([]int64{r}, inner...)
	case RoleHadaW1A, RoleHadaW2A:
		if conv && len(kern) > 0 {
			return []int64{r, rows} // Tucker: [r, out]
		}
		return []int64{rows, r}
	case RoleHadaW1B, RoleHadaW2B:
		if conv && len(kern) > 0 {
			return []int64{r, inner[0]}
		}
		return []int64{r, cols}
	case RoleHadaT1, RoleHadaT2:
		return append([]int64{r, r}, kern...)
	case RoleLoKrW1:
		return []int64{2, 1}
	case RoleLoKrW2:
		return []int64{rows / 2, cols}
	case RoleDiff:
		return append([]int64{rows}, inner...)
	case RoleDiffBias:
		return []int64{rows}
	case RoleDoRA:
		return []int64{rows, 1}
	case RoleAlpha, RoleScale:
		return nil
	}
	panic("factorShapes: " + role.String())
}

// TestKeyLists resolves the key lists of real adapters against base models
// of their family: every key must belong to a layer, every layer must match
// a base tensor with fitting shapes, and the hand-written expectations
// (which base tensor, which rows) must hold.
func TestKeyLists(t *testing.T) {
	files, err := filepath.Glob("testdata/keys/*.txt")
	if err != nil || len(files) < 20 {
		t.Fatalf("key lists: %v, %d files", err, len(files))
	}
	bases := map[string]*Base{}
	for _, path := range files {
		kl := readKeyList(t, path)
		t.Run(kl.file, func(t *testing.T) {
			if len(kl.bases) == 0 {
				t.Fatal("no @base")
			}
			for bi, bn := range kl.bases {
				b := bases[bn]
				if b == nil {
					b = testBase(t, bn)
					bases[bn] = b
				}
				checkKeyList(t, kl, b, bi == 0)
			}
		})
	}
}

func checkKeyList(t *testing.T, kl *keyList, b *Base, expectations bool) {
	keys := kl.complete(t)
	// Resolve every module first: a fused base tensor whose parts the list
	// names one by one (q, k, v) gets factors of one part's rows, which for
	// attention projections are as many as the tensor's columns.
	hits := map[string]hit{}
	partsOf := map[string]map[int]bool{}
	for _, k := range keys {
		mod, role, ok := ParseKey(k)
		if !ok || role == RoleRefused || role == RoleAlpha || kl.refused {
			continue
		}
		if _, given := kl.shapes[k]; given {
			continue
		}
		bias := role == RoleDiffBias
		h, err := b.resolve(&Layer{Module: mod, Bias: bias})
		if err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		hits[k] = h
		if partsOf[h.group] == nil {
			partsOf[h.group] = map[int]bool{}
		}
		partsOf[h.group][h.part] = true
	}
	m := newMem(kl.file)
	for _, k := range keys {
		_, role, ok := ParseKey(k)
		if kl.refused && (!ok || role == RoleRefused) {
			m.add(k, formats.F16, []int64{8}, nil)
			continue
		}
		if !ok {
			t.Fatalf("key %q: no suffix", k)
		}
		if s, ok := kl.shapes[k]; ok {
			m.add(k, formats.F16, s, scalarFor(role))
			continue
		}
		if role == RoleAlpha {
			m.add(k, formats.F16, nil, []float32{4})
			continue
		}
		h := hits[k]
		parts := b.groups[h.group]
		part := b.tensors[parts[0]]
		rows := part.rowsOf()
		switch {
		case len(parts) > 1:
			part = b.tensors[parts[h.part]]
			rows = part.rowsOf()
		case len(partsOf[h.group]) > 1 || h.part > 0:
			rows = prod(part.shape[1:])
		}
		m.add(k, formats.F16, factorShapes(role, part.shape, rows, len(part.shape) == 4), nil)
	}
	a, err := Read(m)
	if err != nil {
		t.Fatal(err)
	}
	if kl.refused {
		if len(a.Layers) != 0 || len(a.Refused) == 0 || len(a.Unknown) != 0 {
			t.Fatalf("refused kind: %d layers, %d refused, unknown %v", len(a.Layers), len(a.Refused), a.Unknown)
		}
		p, err := b.Match(Use{Adapter: a, Strength: 1})
		if err != nil || len(p.Targets) != 0 || len(p.Unmatched) != len(a.Refused) {
			t.Fatalf("refused kind: %v, %d targets, %d unmatched", err, len(p.Targets), len(p.Unmatched))
		}
		if !strings.Contains(p.Unmatched[0].Reason, "IA3") {
			t.Errorf("reason %q does not name the kind", p.Unmatched[0].Reason)
		}
		return
	}
	if len(a.Unknown) > 0 || len(a.Refused) > 0 {
		t.Fatalf("unknown %v, refused %v", a.Unknown, a.Refused)
	}
	p, err := b.Match(Use{Adapter: a, Strength: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Unmatched) > 0 {
		for _, u := range p.Unmatched {
			t.Errorf("unmatched %s: %s", u.Module, u.Reason)
		}
		t.FailNow()
	}
	for _, l := range a.Layers {
		if l.DoRA != kl.dora {
			t.Errorf("layer %s: DoRA %v", l.Module, l.DoRA)
		}
	}
	if !expectations {
		return
	}
	sum := Summarize(a)
	want := map[string]string{"sd1": "sd1", "sdxl": "sdxl", "flux": "flux", "flux_clip": "flux",
		"wan14b": "wan", "wan14b_i2v": "wan"}[kl.bases[0]]
	if sum.Parts["unet"] == 0 && sum.Parts["te2"] == 0 {
		want = "" // one CLIP alone does not tell the family
	}
	if sum.Family != want {
		t.Errorf("family %q, want %q", sum.Family, want)
	}
	if sum.Layers != len(a.Layers) || sum.Kinds[a.Layers[0].Kind] == 0 || !IsAdapter(m.list) {
		t.Errorf("summary %+v", sum)
	}
	for _, e := range kl.expect {
		found := false
		for _, tg := range p.Targets {
			for _, c := range tg.Changes {
				if c.Layer.Module != e.module || c.Layer.Bias != e.bias {
					continue
				}
				if tg.Name != e.base && strings.TrimPrefix(tg.Name, "model.diffusion_model.") != e.base {
					continue
				}
				want := e.rows
				if want == [2]int64{} {
					want = [2]int64{0, tg.Rows}
				}
				if c.TargetRow != want[0] || c.TargetRow+c.Rows != want[1] {
					t.Errorf("%s -> %s: rows [%d, %d), want [%d, %d)", e.module, tg.Name, c.TargetRow, c.TargetRow+c.Rows, want[0], want[1])
				}
				found = true
			}
		}
		if !found {
			var got []string
			for _, tg := range p.Targets {
				for _, c := range tg.Changes {
					if c.Layer.Module == e.module {
						got = append(got, tg.Name)
					}
				}
			}
			sort.Strings(got)
			t.Errorf("%s (bias %v) does not change %s; it changes %v", e.module, e.bias, e.base, got)
		}
	}
}

// scalarFor gives alpha tensors a value.
func scalarFor(r Role) []float32 {
	if r == RoleAlpha {
		return []float32{4}
	}
	return nil
}

func ExampleParseKey() {
	for _, k := range []string{
		"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight",
		"transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight",
		"lycoris_blocks_18_attn1_to_k.lokr_w1",
		"diffusion_model.blocks.26.cross_attn.v_img.diff_b",
	} {
		m, r, _ := ParseKey(k)
		fmt.Printf("%s %s\n", m, r)
	}
	// Output:
	// lora_unet_down_blocks_0_attentions_0_proj_in up
	// transformer.single_transformer_blocks.0.attn.to_q down
	// lycoris_blocks_18_attn1_to_k lokr_w1
	// diffusion_model.blocks.26.cross_attn.v_img diff_b
}

// The families a summary names are the family table's IDs (one vocabulary).
func TestSummaryFamiliesAreTableIDs(t *testing.T) {
	ids := []string{}
	for _, fm := range familyMarkers {
		ids = append(ids, fm.id)
	}
	for _, u := range unetContext {
		ids = append(ids, u.id)
	}
	for _, id := range ids {
		if f := family.ByID(id); f == nil || f.Kind != family.KindDiffusion {
			t.Errorf("summary family %q is no diffusion family of the family table", id)
		}
	}
}

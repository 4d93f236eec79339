package family

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
)

const headersDir = "../testdata/headers"

// TestRealHeaders detects families on the tensor lists that model
// repositories publish (testdata/headers; its README names each list's
// source). Each list must be detected as the family, variant and
// components its case names, its listed high-precision tensors must be on
// the family's keep lists and its listed linear layers off them.
func TestRealHeaders(t *testing.T) {
	lists, err := synth.ReadRealLists(headersDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lists {
		tensors, err := l.Descriptors(headersDir)
		if err != nil {
			t.Error(err)
			continue
		}
		a := Detect(tensors, metaOf(l.Meta))
		if a.Name != l.Family || a.Variant() != l.Variant {
			t.Errorf("%s: detected %s (%q), want %s (%q); components %+v", l.File, a.Name, a.Variant(), l.Family, l.Variant, a.Components)
			continue
		}
		if l.Components != nil {
			var got []string
			for _, c := range a.Components {
				got = append(got, c.Name)
			}
			if !slices.Equal(got, l.Components) {
				t.Errorf("%s: components %v, want %v", l.File, got, l.Components)
			}
		}
		if a.Unassigned != l.Unassigned {
			t.Errorf("%s: %d tensors under no component, want %d", l.File, a.Unassigned, l.Unassigned)
		}
		shapes := map[string][]int64{}
		for _, x := range tensors {
			shapes[x.Name] = x.Shape
		}
		for _, group := range []struct {
			names []string
			keep  bool
		}{{l.Keep, true}, {l.Quantized, false}} {
			for _, n := range group.names {
				s, ok := shapes[n]
				if !ok {
					t.Errorf("%s: %s is not in the list", l.File, n)
					continue
				}
				_, cls := a.Classify(n, s)
				if kept := cls.Keep != "" || cls.F32 != ""; kept != group.keep {
					t.Errorf("%s: %s kept %v (%q), want %v", l.File, n, kept, cls.Keep, group.keep)
				}
			}
		}
	}
}

// TestLayoutsMatchRealHeaders: every tensor of a family's synthetic layout
// is named as in the published list (block numbers folded), so the
// layouts that the family table is tested on carry real names.
func TestLayoutsMatchRealHeaders(t *testing.T) {
	lists, err := synth.ReadRealLists(headersDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lists {
		if l.Layout == "" {
			continue
		}
		tensors, err := l.Descriptors(headersDir)
		if err != nil {
			t.Fatal(err)
		}
		real := map[string]bool{}
		for _, x := range tensors {
			real[synth.FoldBlocks(x.Name)] = true
		}
		layout := synthTensors(t, synth.Spec{Arch: l.Layout})
		var missing []string
		for _, x := range layout {
			if n := synth.FoldBlocks(l.LayoutPrefix + x.Name); !real[n] && !slices.Contains(missing, n) {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s: %d names of %s are not in %s: %s", l.Layout, len(missing), l.Layout, l.File, strings.Join(missing, ", "))
		}
	}
}

// TestRealHeadersREADME: every committed list has a case and a line in the
// README that names its source.
func TestRealHeadersREADME(t *testing.T) {
	lists, err := synth.ReadRealLists(headersDir)
	if err != nil {
		t.Fatal(err)
	}
	readme := readFile(t, headersDir+"/README.md")
	files := globNames(t, headersDir+"/*.names.gz")
	var cased []string
	for _, l := range lists {
		cased = append(cased, l.File)
		if !strings.Contains(readme, "`"+l.File+"`") {
			t.Errorf("README.md does not name %s's source", l.File)
		}
	}
	for _, f := range files {
		if !slices.Contains(cased, f) {
			t.Errorf("%s has no case in cases.json", f)
		}
	}
}

func metaOf(m map[string]string) formats.Metadata {
	var md formats.Metadata
	for k, v := range m {
		md = append(md, formats.KV{Key: k, Type: formats.TypeString, Value: v})
	}
	return md
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func globNames(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// TestMiniMaxH3AdaLN: MiniMax-H3's per-block AdaLN projections (18x the
// width by the time embedding, a third of the DiT's weights) are linear
// layers a mix quantizes; the final layer's projection and heads stay.
// Names as diffusers' conversion script maps the released checkpoint.
func TestMiniMaxH3AdaLN(t *testing.T) {
	f := ByID("minimax_h3")
	for _, c := range []struct {
		name string
		keep bool
	}{
		{"blocks.7.adaln_proj.linear.weight", false},
		{"token_refiner.blocks.0.attn.qkv_proj.weight", false},
		{"final_layer.adaln_proj.linear.weight", true},
		{"final_layer.video_out.weight", true},
		{"final_layer.audio_out.weight", true},
		{"time_embedder.proj_in.weight", true},
	} {
		if got := f.Classify(c.name, []int64{64, 64}).Keep != ""; got != c.keep {
			t.Errorf("%s: kept %v, want %v", c.name, got, c.keep)
		}
	}
}

// TestHunyuanVideo15Layout: HunyuanVideo 1.5's double blocks (original
// names, as diffusers' conversion script reads the released checkpoint)
// are quantized; its inputs, refiner and final layer stay, and the
// condition-type embedding is a lookup table, not a linear layer.
func TestHunyuanVideo15Layout(t *testing.T) {
	a := Detect(synthTensors(t, synth.Spec{Arch: "layout-hunyuan-video-1.5"}), nil)
	if a.Name != "hunyuan_video" || a.Variant() != "1.5" {
		t.Fatalf("detected %s (%q)", a.Name, a.Variant())
	}
	for _, c := range []struct {
		name   string
		keep   bool
		linear bool
	}{
		{"double_blocks.3.img_attn_q.weight", false, true},
		{"double_blocks.3.txt_mlp.fc2.weight", false, true},
		{"double_blocks.3.img_mod.linear.weight", false, true},
		{"txt_in.individual_token_refiner.blocks.0.self_attn_qkv.weight", true, true},
		{"byt5_in.fc1.weight", true, true},
		{"final_layer.linear.weight", true, true},
		{"cond_type_embedding.weight", true, false},
	} {
		_, cls := a.Classify(c.name, []int64{64, 64})
		if (cls.Keep != "") != c.keep || cls.Linear != c.linear {
			t.Errorf("%s: kept %q linear %v, want kept %v linear %v", c.name, cls.Keep, cls.Linear, c.keep, c.linear)
		}
	}
}

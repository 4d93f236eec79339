package merge

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/tensor"
)

// TestGGUFOutputsFoldFiveDims merges and grafts a Wan-like 5-D patch
// kernel into GGUF: it is stored [out·in, t, h, w] as sd-cli's convert
// stores it (ggml and sd.cpp refuse 5-D GGUFs that carry arrays), with the
// torch shape in comfy.gguf.orig_shape, so that merging that file again
// sees 5-D and gets the same values as from the safetensors source.
func TestGGUFOutputsFoldFiveDims(t *testing.T) {
	dir := t.TempDir()
	kShape := []int64{4, 3, 1, 2, 2}
	files := make([]string, 2)
	for i := range files {
		files[i] = write(t, filepath.Join(dir, []string{"a", "b"}[i]+".safetensors"), nil,
			tF32("patch_embedding.weight", kShape, ramp(48, uint64(i+1))),
			tF32("head.weight", []int64{4, 8}, ramp(32, uint64(i+7))))
	}
	check := func(path string) []float32 {
		t.Helper()
		got, _, m := readAll(t, path)
		if k := got["patch_embedding.weight"]; !slices.Equal(k.shape, []int64{12, 1, 2, 2}) {
			t.Errorf("%s: kernel stored %v, want [12 1 2 2]", path, k.shape)
		}
		kv, ok := m.Metadata().Get(gguf.OrigShapePrefix + "patch_embedding.weight")
		if a, isArray := kv.Value.(formats.Array); !ok || !isArray || !slices.Equal(a.Values.([]int32), []int32{4, 3, 1, 2, 2}) {
			t.Errorf("%s: orig_shape %v, want [4 3 1 2 2]", path, kv.Value)
		}
		if _, ok := m.Metadata().Get(gguf.OrigShapePrefix + "head.weight"); ok {
			t.Errorf("%s: orig_shape written for a 2-D tensor", path)
		}
		view, err := tensor.NewView(m)
		if err != nil {
			t.Fatal(err)
		}
		if s := view.Sources[0].Shape(); !slices.Equal(s, kShape) {
			t.Errorf("%s: read back as %v, want %v", path, s, kShape)
		}
		return floats(got["patch_embedding.weight"].data)
	}

	ws := filepath.Join(dir, "ws.gguf")
	merged(t, &Arithmetic{Method: WeightedSum, A: files[0], B: files[1], Alpha: ptr(0.25)}, ws, 2, 0)
	want := check(ws)
	again := filepath.Join(dir, "again.gguf")
	merged(t, &Arithmetic{Method: WeightedSum, A: ws, B: ws}, again, 2, 0)
	got := check(again)
	if !slices.Equal(got, want) {
		t.Error("merging the folded GGUF with itself changed the kernel's values")
	}

	r := recipeFile(t, dir, `{"sources": [{"path": "a.safetensors", "include": [".*"]}]}`)
	gr := filepath.Join(dir, "graft.gguf")
	p, err := PlanRecipe(r, gr, "")
	if err != nil {
		t.Fatal(err)
	}
	runPlan(t, p, 2, 0)
	if !slices.Equal(check(gr), ramp(48, 1)) {
		t.Error("the grafted kernel's values changed")
	}
}

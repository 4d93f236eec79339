package pipeline

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/tensor"
)

// TestFoldHighDims writes a Wan-like patch kernel [4, 3, 1, 2, 2] beside a
// matrix: in GGUF the kernel is stored [12, 1, 2, 2] with its torch shape
// in comfy.gguf.orig_shape (a stale key replaced), its bytes unchanged,
// and sdtool's reader gives the 5-D shape back; safetensors keeps 5-D.
func TestFoldHighDims(t *testing.T) {
	src := newMemModel("in")
	kernel := src.add("patch_embedding.weight", formats.F16, []int64{4, 3, 1, 2, 2}, f16Data(48, 1))
	matrix := src.add("head.weight", formats.F16, []int64{4, 8}, f16Data(32, 2))
	dir := t.TempDir()
	for _, tc := range []struct {
		file   string
		folded int
		stored []int64
	}{
		{"out.gguf", 1, []int64{12, 1, 2, 2}},
		{"out.safetensors", 0, []int64{4, 3, 1, 2, 2}},
	} {
		out := filepath.Join(dir, tc.file)
		format, err := formats.CreatorFor(out)
		if err != nil {
			t.Fatal(err)
		}
		p := &Plan{Path: out, Format: format}
		for _, st := range []formats.Tensor{kernel, matrix} {
			p.Outputs = append(p.Outputs, Output{Name: st.Name, Type: st.Type, Shape: st.Shape, Producer: Copy(src, st), Source: &st})
		}
		stale := formats.KV{Key: gguf.OrigShapePrefix + kernel.Name, Type: formats.TypeString, Value: "stale"}
		p.Header.Metadata = formats.Metadata{stale}
		if n := FoldHighDims(p); n != tc.folded {
			t.Errorf("%s: %d outputs folded, want %d", tc.file, n, tc.folded)
		}
		if !slices.Equal(kernel.Shape, []int64{4, 3, 1, 2, 2}) {
			t.Fatalf("the source's shape was changed to %v", kernel.Shape)
		}
		if err := Run(context.Background(), p, Options{}); err != nil {
			t.Fatal(err)
		}
		m, err := formats.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		got := m.Tensors()[0]
		if !slices.Equal(got.Shape, tc.stored) {
			t.Errorf("%s: kernel stored %v, want %v", tc.file, got.Shape, tc.stored)
		}
		buf := make([]byte, got.Size)
		if _, err := m.ReadTensorAt(&got, buf, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, src.Data[kernel.Name]) {
			t.Errorf("%s: kernel bytes changed", tc.file)
		}
		if tc.folded == 0 {
			continue
		}
		view, err := tensor.NewView(m)
		if err != nil {
			t.Fatal(err)
		}
		if s := view.Sources[0].Shape(); !slices.Equal(s, kernel.Shape) {
			t.Errorf("%s: read back as %v, want the torch shape %v", tc.file, s, kernel.Shape)
		}
		if n := len(m.Metadata()); n != 1 {
			t.Errorf("%s: %d metadata keys, want the one orig_shape key (the stale one replaced)", tc.file, n)
		}
	}
}

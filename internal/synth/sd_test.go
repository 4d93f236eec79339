package synth

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	_ "github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
)

// Regenerating the committed tiny models gives identical bytes (TinySD in
// both of its formats, TinySDXL).
func TestTinySDGolden(t *testing.T) {
	for _, c := range []struct {
		path  string
		cfg   SD
		limit int
	}{
		{"../../testdata/tiny-sd1.gguf", TinySD, 4 << 20},
		{"../../testdata/tiny-sd1.safetensors", TinySD, 4 << 20},
		{"../../testdata/tiny-sdxl.gguf", TinySDXL, 3 << 20},
	} {
		want, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := c.cfg.EncodeAs(&buf, strings.TrimPrefix(filepath.Ext(c.path), ".")); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("regenerated %s (%d bytes) differs from testdata (%d bytes); run go run ./internal/synth/cmd/gensynth -testdata testdata -force",
				c.path, buf.Len(), len(want))
		}
		if len(want) > c.limit {
			t.Errorf("%s is %d bytes, want at most %d", c.path, len(want), c.limit)
		}
	}
}

// The two committed files are one model: the same tensors, shapes, values
// and metadata (safetensors holds the numbers as text).
func TestTinySDOneModelTwoFormats(t *testing.T) {
	g, err := formats.Open("../../testdata/tiny-sd1.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	s, err := formats.Open("../../testdata/tiny-sd1.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(g.Tensors()) != len(s.Tensors()) {
		t.Fatalf("%d tensors in the GGUF, %d in the safetensors", len(g.Tensors()), len(s.Tensors()))
	}
	for _, gt := range g.Tensors() {
		st, ok := formats.Find(s, gt.Name)
		if !ok {
			t.Errorf("tensor %q only in the GGUF", gt.Name)
			continue
		}
		a, _ := formats.ReadTensor(g, &gt)
		b, _ := formats.ReadTensor(s, &st)
		if st.Type != gt.Type || !slices.Equal(st.Shape, gt.Shape) || !bytes.Equal(a, b) {
			t.Errorf("tensor %q differs: %s %v and %s %v", gt.Name, gt.Type, gt.Shape, st.Type, st.Shape)
		}
	}
	for _, kv := range g.Metadata() {
		v, ok := s.Metadata().String(kv.Key)
		if !ok || v != fmt.Sprint(kv.Value) {
			t.Errorf("metadata %s = %v in the GGUF, %q in the safetensors", kv.Key, kv.Value, v)
		}
	}
}

func TestMerges(t *testing.T) {
	m := Merges([]string{"cat", "car", "a"})
	want := []string{"c a", "ca t</w>", "ca r</w>"}
	if strings.Join(m, "|") != strings.Join(want, "|") {
		t.Errorf("merges %q, want %q", m, want)
	}
	if v := (SD{Words: []string{"cat", "car"}}).Vocab(); v != 512+3+2 {
		t.Errorf("vocab %d", v)
	}
}

package synth

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// Regenerating the committed tiny models gives identical bytes.
func TestTinySDGolden(t *testing.T) {
	for _, c := range []struct {
		path, preset string
		cfg          SD
		limit        int
	}{{"../../testdata/tiny-sd1.gguf", "tiny", TinySD, 4 << 20}, {"../../testdata/tiny-sdxl.gguf", "tiny-sdxl", TinySDXL, 3 << 20}} {
		want, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := c.cfg.Encode(&buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("regenerated %s (%d bytes) differs from testdata (%d bytes); run go run ./internal/synth/cmd/gensynth -sd %s -o %s",
				c.path, buf.Len(), len(want), c.preset, c.path[len("../../"):])
		}
		if len(want) > c.limit {
			t.Errorf("%s is %d bytes, want at most %d", c.path, len(want), c.limit)
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

package synth

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// Regenerating the committed tiny model gives identical bytes.
func TestTinySDGolden(t *testing.T) {
	want, err := os.ReadFile("../../testdata/tiny-sd1.gguf")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := TinySD.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("regenerated tiny model (%d bytes) differs from testdata (%d bytes); run go run ./internal/synth/cmd/gensynth", buf.Len(), len(want))
	}
	if len(want) > 4<<20 {
		t.Errorf("tiny model is %d bytes, want at most 4 MiB", len(want))
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

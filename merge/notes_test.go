package merge

import (
	"path/filepath"
	"strings"
	"testing"
)

// An --alpha-rules rule that matches no tensor is noted, and A's model
// metadata reaches an output of the other format.
func TestArithmeticNotesAndMetadata(t *testing.T) {
	const tinyST, tinyGG = "../testdata/tiny-sd1.safetensors", "../testdata/tiny-sd1.gguf"
	p, err := PlanArithmetic(&Arithmetic{Method: WeightedSum, A: tinyST, B: tinyGG, AlphaRules: `zzz=0.1,output_blocks\.=0.7`},
		filepath.Join(t.TempDir(), "m.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	notes := strings.Join(p.Notes, "\n")
	if !strings.Contains(notes, `--alpha-rules rule "zzz=0.1" matches no tensor`) || strings.Contains(notes, "output_blocks") {
		t.Errorf("notes:\n%s", notes)
	}
	if kv, ok := p.Header.Metadata.Get("sdtool.unet.num_heads"); !ok || kv.Value != "8" {
		t.Errorf("A's head count was not carried: %v", kv)
	}
	if _, ok := p.Header.Metadata.Get("sdtool.merge"); !ok {
		t.Error("no sdtool.merge")
	}
}

// Two sources that overlap on many tensors make one short error that
// counts them and names the first few, not one clause per tensor.
func TestRecipeConflictsGrouped(t *testing.T) {
	r, err := ParseRecipe("r.json", []byte(`{"sources": [{"path": "../testdata/tiny-sd1.safetensors", "include": [".*"]}, {"path": "../testdata/tiny-sd1.gguf", "include": ["attn"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = PlanRecipe(r, filepath.Join(t.TempDir(), "o.safetensors"), "")
	if err == nil {
		t.Fatal("overlapping sources accepted")
	}
	msg := err.Error()
	if !strings.Contains(msg, "output tensors are selected twice, by sources[0] ../testdata/tiny-sd1.safetensors and by sources[1] ../testdata/tiny-sd1.gguf: first ") ||
		strings.Count(msg, "selected twice") != 1 || len(msg) > 600 {
		t.Errorf("error (%d bytes): %s", len(msg), msg)
	}
}

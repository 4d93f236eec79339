package quantize

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/pipeline"
)

// TestQuantizeLeavesOutPositionIDs: a GGUF output leaves out CLIP's
// integer position_ids, as sd-cli's convert does (sd.cpp drops it by name,
// and its convert stopped on sdtool's I64 copy: "tensor ... not found");
// the ComfyUI safetensors output keeps it. With SDTOOL_SDCLI (and
// SDTOOL_LONG) sd-cli -M convert must read the whole GGUF.
func TestQuantizeLeavesOutPositionIDs(t *testing.T) {
	const ids = "cond_stage_model.transformer.text_model.embeddings.position_ids"
	find(t, mustOpen(t, tinyPath), ids) // the input has it, I64 as transformers saves it
	dir := t.TempDir()
	gg := filepath.Join(dir, "q.gguf")
	run(t, Options{Input: tinyPath, Output: gg, Type: "Q8_0"}, pipeline.Options{})
	for _, tt := range mustOpen(t, gg).Tensors() {
		if strings.HasSuffix(tt.Name, "position_ids") {
			t.Errorf("the GGUF output holds %s (%s)", tt.Name, tt.Type)
		}
	}
	st := filepath.Join(dir, "q.safetensors")
	run(t, Options{Input: tinyPath, Output: st, Type: "int8"}, pipeline.Options{})
	find(t, mustOpen(t, st), ids)

	sdcli := os.Getenv("SDTOOL_SDCLI")
	if sdcli == "" {
		t.Skip("SDTOOL_SDCLI is not set: sd-cli's convert not tried")
	}
	longtest.Skip(t, "sd-cli -M convert over the tiny model (about 6 s)")
	out, err := exec.Command(sdcli, "-M", "convert", "-m", gg, "-o", filepath.Join(dir, "back.gguf"), "--type", "q8_0").CombinedOutput()
	if err != nil || strings.Contains(string(out), "[ERROR]") {
		t.Errorf("sd-cli -M convert: %v: %s", err, errorLines(string(out)))
	}
}

// errorLines returns sd-cli's [ERROR] messages in its output (which is
// mostly a progress bar).
func errorLines(s string) string {
	var out []string
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if _, msg, ok := strings.Cut(l, "[ERROR]"); ok {
			out = append(out, strings.TrimSpace(msg))
		}
	}
	return strings.Join(out, "; ")
}

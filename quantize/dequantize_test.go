package quantize

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/pipeline"
)

// A float --type on a quantized input is a plain dequantization: no
// --allow-requantize, no quality warning, every tensor in that type, and
// the summary says what was decoded. A quantized --type still needs the flag.
func TestQuantizeBackToFloat(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "q4k.gguf")
	run(t, Options{Input: tinyPath, Output: q, Type: "Q4_K_M"}, pipeline.Options{})
	for _, typ := range []string{"F16", "BF16", "F32"} {
		var logs bytes.Buffer
		out := filepath.Join(dir, "back-"+typ+".gguf")
		res := run(t, Options{Input: q, Output: out, Type: typ, Log: logTo(&logs)}, pipeline.Options{})
		if strings.Contains(logs.String(), "quality suffers") {
			t.Errorf("%s: warns about quality: %s", typ, logs.String())
		}
		if res.Dequantized == 0 || !strings.Contains(strings.Join(notes(res.Report), "\n"), "dequantized: ") {
			t.Errorf("%s: the report does not say it dequantized (%d)", typ, res.Dequantized)
		}
		m := mustOpen(t, out)
		for _, ts := range m.Tensors() {
			if ts.Type.Quantized() {
				t.Errorf("%s: tensor %s is %s", typ, ts.Name, ts.Type)
			}
		}
		m.Close()
	}
	_, err := quantizeRun(context.Background(), &Options{Input: q, Output: filepath.Join(dir, "re.gguf"), Type: "Q8_0"}, pipeline.Options{}, false)
	if !errors.Is(err, ErrRequantize) {
		t.Errorf("requantizing to Q8_0 without --allow-requantize: %v", err)
	}
}

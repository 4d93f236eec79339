package infer_test

import (
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/sd"
	"github.com/sdtool/sdtool/internal/synth"
)

// A UNet whose width does not fit the head layout assumed without metadata
// is refused with the missing keys named and the command that adds them.
func TestDetectConfigNamesMissingHeadKey(t *testing.T) {
	sh := map[string][]int64{}
	for _, ts := range synth.TinySD.Tensors() {
		sh[ts.Name] = ts.Shape
	}
	_, err := infer.DetectConfig(sh, nil)
	if err == nil {
		t.Fatal("a 32-wide UNet without head metadata was accepted")
	}
	for _, want := range []string{sd.MetaUNetHeads, sd.MetaUNetHeadDim, "sdtool convert", "--metadata " + sd.MetaUNetHeads + "=N"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q is not one line", err)
	}
}

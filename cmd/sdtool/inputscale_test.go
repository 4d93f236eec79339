//go:build cgo

package main

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant/imatrix"
)

// Calibrated input_scale end to end (issue 32 item 2): generate
// --imatrix-out to a .gguf records each layer's activation maxima, and
// quantize --imatrix turns them into fp8 and nvfp4 modules' input_scale
// (max/448, max/2688). (TestGenerateImatrixPromptFile checks that a .dat
// output says it keeps none.)
func TestGenerateCalibratesInputScale(t *testing.T) {
	longtest.Skip(t, "input scales calibrated from a render")
	dir := t.TempDir()
	im := filepath.Join(dir, "calib.gguf")
	if msg := genImatrix(t, "-p", "a cat", "-o", filepath.Join(dir, "a.png"), "--imatrix-out", im); strings.Contains(msg, "write .gguf to keep them") {
		t.Errorf("a .gguf output says the maxima are dropped: %s", msg)
	}
	m, err := imatrix.Open(im)
	if err != nil {
		t.Fatal(err)
	}
	const layer = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2"
	e, ok := m.Lookup(layer + ".weight")
	mx, has := e.Max()
	if !ok || !has || !(mx > 0) {
		t.Fatalf("%s: no activation maximum in %s (%v)", layer, im, e)
	}
	for typ, r := range map[string]float64{"fp8_e4m3": 448, "nvfp4": 2688} {
		out := filepath.Join(dir, typ+".safetensors")
		code, _, errOut := runApp(t, "quantize", tinyGGUF, "--allow-requantize", "--type", typ, "--imatrix", im, "-o", out)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", typ, code, errOut)
		}
		if !strings.Contains(errOut, "input_scale calibrated from the imatrix's activation maxima") {
			t.Errorf("%s: the report does not say input_scale was calibrated: %s", typ, errOut)
		}
		q := openModel(t, out)
		var is *formats.Tensor
		for _, tt := range q.Tensors() {
			if tt.Name == layer+".input_scale" {
				is = &tt
			}
		}
		if is == nil {
			t.Fatalf("%s: no %s.input_scale", typ, layer)
		}
		raw, err := formats.ReadTensor(q, is)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := math.Float32frombits(binary.LittleEndian.Uint32(raw)), float32(float64(mx)/r); got != want {
			t.Errorf("%s: input_scale %v, want %v (activation max %v / %v)", typ, got, want, mx, r)
		}
	}
}

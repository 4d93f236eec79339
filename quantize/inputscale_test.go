package quantize

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
	"github.com/sdtool/sdtool/tensor"
)

// TestQuantizeInputScale: with a GGUF imatrix that records activation
// maxima, every fp8 and nvfp4 module whose layer has an entry gets
// <module>.input_scale = max/448 (fp8 e4m3), max/57344 (e5m2) or
// max/2688 (nvfp4), an F32 scalar as ComfyUI loads it, and the plan says
// how many; a layer whose entry lacks maxima gets none, and int8 refuses
// the imatrix.
func TestQuantizeInputScale(t *testing.T) {
	dir := t.TempDir()
	src, err := imatrix.Open("../testdata/tiny-sd1.imatrix.dat")
	if err != nil {
		t.Fatal(err)
	}
	// The first transformer layer's entry is left without maxima.
	var withMax, without string
	for i, e := range src.Entries {
		if without == "" && strings.Contains(e.Name, "transformer_blocks") {
			without = e.Name
			continue
		}
		e.AbsMax = make([]float32, len(e.Sum2))
		for j := range e.AbsMax {
			e.AbsMax[j] = float32(i) + float32(j%7)/8
		}
		if withMax == "" && strings.HasSuffix(e.Name, "ff.net.2.weight") {
			withMax = e.Name
		}
	}
	if withMax == "" || without == "" {
		t.Fatalf("the tiny imatrix has no transformer layers (%q, %q)", withMax, without)
	}
	im := filepath.Join(dir, "im.gguf")
	f, err := os.Create(im)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := imatrix.WriteGGUF(f, src); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, c := range []struct {
		typ string
		rng float64
	}{{"fp8_e4m3", 448}, {"fp8_e5m2", 57344}, {"nvfp4", 2688}} {
		out := filepath.Join(dir, c.typ+".safetensors")
		res := run(t, Options{Input: tinyPath, Output: out, Type: c.typ, Imatrix: []string{im}, Targets: []string{"comfyui"}}, pipeline.Options{})
		m := mustOpen(t, out)
		e, _ := src.Lookup(withMax)
		mx, _ := e.Max()
		mod := strings.TrimSuffix(withMax, ".weight")
		is := find(t, m, mod+".input_scale")
		raw, _ := formats.ReadTensor(m, &is)
		if got, want := math.Float32frombits(binary.LittleEndian.Uint32(raw)), float32(float64(mx)/c.rng); is.Type != formats.F32 || len(is.Shape) != 0 || got != want {
			t.Errorf("%s: %s is %s %v = %v, want an f32 scalar %v", c.typ, is.Name, is.Type, is.Shape, got, want)
		}
		modules, scales := 0, 0
		for _, tt := range m.Tensors() {
			if tt.Name == strings.TrimSuffix(without, ".weight")+".input_scale" {
				t.Errorf("%s: %s has an input_scale without maxima in the imatrix", c.typ, without)
			}
			if strings.HasSuffix(tt.Name, ".comfy_quant") {
				modules++
			}
			if strings.HasSuffix(tt.Name, ".input_scale") {
				scales++
			}
		}
		if _, err := tensor.NewView(m); err != nil {
			t.Errorf("%s: sdtool does not read its own output: %v", c.typ, err)
		}
		if scales != res.inputScales || scales == 0 || scales >= modules {
			t.Errorf("%s: %d input_scale tensors (report %d) for %d modules, one module without maxima", c.typ, scales, res.inputScales, modules)
		}
		notes := strings.Join(res.Consumers[0].Notes, "\n")
		if res.inputScales == 0 || !strings.Contains(notes, "input_scale calibrated from the imatrix's activation maxima") {
			t.Errorf("%s: %d calibrated layers, notes %q", c.typ, res.inputScales, notes)
		}
	}
	opts := Options{Input: tinyPath, Output: filepath.Join(dir, "i8.safetensors"), Type: "int8", Imatrix: []string{im}}
	if _, err := quantizeRun(t.Context(), &opts, pipeline.Options{}, true); err == nil || !strings.Contains(err.Error(), "uses neither") {
		t.Errorf("int8 with --imatrix: %v", err)
	}
}

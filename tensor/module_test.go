package tensor

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/internal/memmodel"
	"github.com/sdtool/sdtool/quant"
)

// memModel is the shared in-memory model (internal/memmodel) under this
// package's names.
type memModel struct{ *memmodel.Model }

func newMemModel() *memModel { return &memModel{memmodel.New("mem.safetensors", "safetensors")} }

// add appends a tensor; data's length must match the type and shape.
func (m *memModel) add(name string, typ formats.DType, shape []int64, data []byte) {
	m.Add(name, typ, shape, data)
}

// addPlan writes a module the way the quantize command will: the plan's
// three tensors with the bytes Layer.Encode gives.
func (m *memModel) addPlan(t *testing.T, p convrot.Layer, w []float32) {
	weight, scale, err := p.Encode(append([]float32(nil), w...))
	if err != nil {
		t.Fatal(err)
	}
	m.add(p.Weight.Name, p.Weight.Type, p.Weight.Shape, weight)
	m.add(p.Scale.Name, p.Scale.Type, p.Scale.Shape, scale)
	m.add(p.Marker.Name, p.Marker.Type, p.Marker.Shape, p.MarkerData)
}

func f32bytes(v ...float32) []byte { return convrot.PutScales(nil, v) }

// readRows decodes n weight rows of mod, from row first, into dst.
func readRows(d *moduleDecoder, m formats.Model, first, n int64, dst []float32) error {
	raw := make([]byte, n*d.rowSize)
	if err := formats.ReadRows(m, &d.mod.Weight, first, n, raw); err != nil {
		return err
	}
	return d.decode(dst, first, raw)
}

// gaussianWithOutliers returns rows×in normal values with a few columns
// scaled by factor, like the activation outliers convrot is made for.
func gaussianWithOutliers(rows, in int, seed uint64, factor float32) []float32 {
	w := randFloats(rows*in, seed)
	for r := 0; r < rows; r++ {
		for _, c := range []int{3, in / 2, in - 1} {
			w[r*in+c] *= factor
		}
	}
	return w
}

func plan(t *testing.T, name string, out, in int64, opt convrot.Options) convrot.Layer {
	p, err := convrot.NewLayer(formats.Tensor{Name: name, Type: formats.BF16, Shape: []int64{out, in}}, opt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDetectAndDecode writes one module of every type plus ordinary tensors,
// detects the modules and checks that the row decoder gives exactly what
// Int8Rows.Dequantize / FP8.Decode give for the stored codes, and that the
// result is close to the original weights.
func TestDetectAndDecode(t *testing.T) {
	m := newMemModel()
	m.add("blocks.0.norm.weight", formats.F32, []int64{4}, f32bytes(1, 2, 3, 4))
	const out, in = 6, 512
	ws := map[string][]float32{}
	opts := []struct {
		name string
		opt  convrot.Options
		in   int64
	}{
		{"blocks.0.attn.qkv", convrot.Options{Type: convrot.Int8Convrot}, in},
		{"blocks.0.attn.proj", convrot.Options{Type: convrot.Int8}, in},
		{"blocks.0.mlp.fc1", convrot.Options{Type: convrot.FP8E4M3}, in},
		{"blocks.0.mlp.fc2", convrot.Options{Type: convrot.FP8E5M2}, in},
		{"blocks.0.small", convrot.Options{Type: convrot.Int8Convrot}, 320}, // falls back to plain int8
	}
	for i, o := range opts {
		w := gaussianWithOutliers(out, int(o.in), uint64(i), 40)
		ws[o.name] = w
		m.addPlan(t, plan(t, o.name+".weight", out, o.in, o.opt), w)
		m.add(o.name+".bias", formats.F32, []int64{out}, make([]byte, 4*out))
	}
	mods, err := comfyquant.Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != len(opts) {
		t.Fatalf("comfyquant.Detect found %d modules, want %d", len(mods), len(opts))
	}
	for i, mod := range mods {
		o := opts[i]
		if mod.Name != o.name || mod.Source != comfyquant.SourceMarker {
			t.Fatalf("module %d = %q from %s, want %q from the marker", i, mod.Name, mod.Source, o.name)
		}
		wantAux := []string{o.name + ".weight_scale", o.name + comfyquant.MarkerSuffix}
		if got := mod.Aux(); strings.Join(got, ",") != strings.Join(wantAux, ",") {
			t.Errorf("%s: Aux() = %v, want %v", o.name, got, wantAux)
		}
		d, err := newModuleDecoder(m, mod)
		if err != nil {
			t.Fatal(err)
		}
		// Decode rows 1..4 (a chunk not starting at 0).
		got := make([]float32, 3*o.in)
		if err := readRows(d, m, 1, 3, got); err != nil {
			t.Fatal(err)
		}
		raw := m.Data[mod.Weight.Name][1*o.in : 4*o.in]
		scales := make([]float32, mod.Scale.Elements())
		if err := quant.DecodeFloats(formats.F32, scales, m.Data[mod.Scale.Name]); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(got))
		switch mod.Config.Format {
		case comfyquant.FormatInt8:
			g := 0
			if mod.Config.Convrot {
				g = mod.Config.GroupSize
			}
			q, _ := convrot.NewInt8Rows(int(o.in), g)
			if err := q.Dequantize(want, raw, scales[1:4]); err != nil {
				t.Fatal(err)
			}
		default:
			typ, _ := comfyquant.WeightType(mod.Config.Format)
			if err := (convrot.FP8{Type: typ, Scale: scales[0]}).Decode(want, raw); err != nil {
				t.Fatal(err)
			}
		}
		for j := range want {
			if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
				t.Fatalf("%s: decoded[%d] = %v, want %v", o.name, j, got[j], want[j])
			}
		}
		orig := ws[o.name][1*o.in : 4*o.in]
		var e, n float64
		for j := range orig {
			e += (float64(orig[j]) - float64(got[j])) * (float64(orig[j]) - float64(got[j]))
			n += float64(orig[j]) * float64(orig[j])
		}
		if rel := math.Sqrt(e / n); rel > 0.1 {
			t.Errorf("%s: relative error %g after a round trip", o.name, rel)
		}
	}
	if !mods[0].Config.Convrot || mods[4].Config.Convrot {
		t.Errorf("convrot flags: %v %v", mods[0].Config, mods[4].Config)
	}
}

// TestDetectLegacyAndMetadata covers the two older layouts: a
// _quantization_metadata header and the scaled_fp8 marker tensor.
func TestDetectLegacyAndMetadata(t *testing.T) {
	m := newMemModel()
	m.Meta = formats.Metadata{{Key: comfyquant.SourceMetadata, Type: formats.TypeString,
		Value: `{"format_version": "1.0", "layers": {"a": {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 4}}}`}}
	m.add("a.weight", formats.I8, []int64{1, 4}, []byte{127, 0, 0, 0})
	m.add("a.weight_scale", formats.F32, []int64{1, 1}, f32bytes(2))
	m.add("scaled_fp8", formats.F8_E4M3, []int64{0}, nil)
	m.add("b.weight", formats.F8_E4M3, []int64{2, 2}, []byte{0x38, 0x30, 0xB8, 0})
	m.add("b.scale_weight", formats.F32, []int64{}, f32bytes(3))
	m.add("b.scale_input", formats.F32, []int64{}, f32bytes(1))
	// A high-precision weight with a dummy scale is not a module.
	m.add("c.weight", formats.BF16, []int64{1, 2}, make([]byte, 4))
	m.add("c.scale_weight", formats.F32, []int64{1}, f32bytes(1))
	mods, err := comfyquant.Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 2 || mods[0].Name != "a" || mods[1].Name != "b" {
		t.Fatalf("modules: %+v", mods)
	}
	if mods[0].Source != comfyquant.SourceMetadata || mods[1].Source != comfyquant.SourceScaledFP8 || mods[1].Config.Format != comfyquant.FormatFP8E4M3 {
		t.Errorf("sources: %s %s %s", mods[0].Source, mods[1].Source, mods[1].Config.Format)
	}
	if got := mods[1].Aux(); len(got) != 2 || got[0] != "b.scale_weight" || got[1] != "b.scale_input" {
		t.Errorf("legacy Aux() = %v", got)
	}
	// a: codes (127,0,0,0)·2 rotated by H4: (254,0,0,0)·H4 = (127,127,127,-127).
	d, err := newModuleDecoder(m, mods[0])
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	if err := readRows(d, m, 0, 1, got); err != nil {
		t.Fatal(err)
	}
	if got[0] != 127 || got[1] != 127 || got[2] != 127 || got[3] != -127 {
		t.Errorf("a decoded to %v, want [127 127 127 -127]", got)
	}
	// b: e4m3 (1, 0.5, -1, 0)·3.
	d, err = newModuleDecoder(m, mods[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := readRows(d, m, 0, 2, got); err != nil {
		t.Fatal(err)
	}
	if got[0] != 3 || got[1] != 1.5 || got[2] != -3 || got[3] != 0 {
		t.Errorf("b decoded to %v, want [3 1.5 -3 0]", got)
	}
}

// TestDecodeTensorwiseInt8 reads an INT8 module with one scale for the
// whole tensor (int8_tensorwise without per-row scales).
func TestDecodeTensorwiseInt8(t *testing.T) {
	m := newMemModel()
	m.add("t.weight", formats.I8, []int64{2, 2}, []byte{1, 0xFF, 127, 0x81})
	m.add("t.weight_scale", formats.BF16, []int64{}, []byte{0x00, 0x3F}) // bf16 0.5
	m.add("t.comfy_quant", formats.U8, []int64{29}, []byte(`{"format": "int8_tensorwise"}`))
	mods, err := comfyquant.Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newModuleDecoder(m, mods[0])
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	if err := readRows(d, m, 0, 2, got); err != nil {
		t.Fatal(err)
	}
	if got[0] != 0.5 || got[1] != -0.5 || got[2] != 63.5 || got[3] != -63.5 {
		t.Errorf("decoded %v, want [0.5 -0.5 63.5 -63.5]", got)
	}
	if err := readRows(d, m, 1, 2, make([]float32, 4)); err == nil {
		t.Error("reading rows past the last row succeeded")
	}
	if err := d.decode(make([]float32, 3), 0, make([]byte, 3)); err == nil {
		t.Error("decoding a partial row succeeded")
	}
}

// The decoder refuses a NaN scale and a module it cannot decode.
func TestDecoderRefuses(t *testing.T) {
	m := newMemModel()
	m.add("a.comfy_quant", formats.U8, []int64{29}, []byte(`{"format": "int8_tensorwise"}`))
	m.add("a.weight", formats.I8, []int64{1, 4}, make([]byte, 4))
	m.add("a.weight_scale", formats.F32, []int64{1, 1}, f32bytes(float32(math.NaN())))
	m.add("b.weight", formats.U8, []int64{2, 8}, make([]byte, 16))
	m.add("b.weight_scale", formats.F8_E4M3, []int64{2, 1}, make([]byte, 2))
	m.add("b.comfy_quant", formats.U8, []int64{27}, []byte(`{"format": "svdquant_w4a4"}`))
	mods, err := comfyquant.Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newModuleDecoder(m, mods[0]); err == nil || !strings.Contains(err.Error(), "a.weight_scale") {
		t.Errorf("NaN scale: %v", err)
	}
	if _, err := newModuleDecoder(m, mods[1]); !errors.Is(err, comfyquant.ErrUnsupportedFormat) || !strings.Contains(err.Error(), "svdquant_w4a4") {
		t.Errorf("NewDecoder(svdquant_w4a4) = %v, want ErrUnsupportedFormat naming it", err)
	}
}

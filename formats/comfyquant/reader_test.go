package comfyquant

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/memmodel"
)

// memModel is the shared in-memory model (internal/memmodel) under this
// package's names.
type memModel struct{ *memmodel.Model }

func newMemModel() *memModel { return &memModel{memmodel.New("mem.safetensors", "safetensors")} }

// add appends a tensor; data's length must match the type and shape.
func (m *memModel) add(name string, typ formats.DType, shape []int64, data []byte) {
	m.Add(name, typ, shape, data)
}

func f32bytes(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// TestDetectMarkers finds marker modules in file order, with their
// weight, scale and auxiliary tensors, and leaves other tensors alone.
func TestDetectMarkers(t *testing.T) {
	m := newMemModel()
	m.add("norm.weight", formats.F32, []int64{4}, f32bytes(1, 2, 3, 4))
	m.add("b.weight", formats.F8_E4M3, []int64{2, 4}, make([]byte, 8))
	m.add("b.weight_scale", formats.F32, []int64{}, f32bytes(1))
	m.add("b.comfy_quant", formats.U8, []int64{27}, []byte(`{"format": "float8_e4m3fn"}`))
	conv := `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 4}`
	m.add("a.comfy_quant", formats.U8, []int64{int64(len(conv))}, []byte(conv))
	m.add("a.weight", formats.I8, []int64{2, 8}, make([]byte, 16))
	m.add("a.weight_scale", formats.F32, []int64{2, 1}, f32bytes(1, 1))
	m.add("a.input_scale", formats.F32, []int64{}, f32bytes(1))
	mods, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 2 || mods[0].Name != "b" || mods[1].Name != "a" {
		t.Fatalf("modules %+v, want b then a (file order of the weights)", mods)
	}
	a := mods[1]
	if a.Source != SourceMarker || !a.Config.Convrot || a.Config.GroupSize != 4 || a.Weight.Name != "a.weight" || a.Scale.Shape[0] != 2 {
		t.Errorf("module a: %+v", a)
	}
	if got := strings.Join(a.Aux(), ","); got != "a.weight_scale,a.comfy_quant,a.input_scale" {
		t.Errorf("Aux() = %s", got)
	}
	if mods[0].Config.Format != FormatFP8E4M3 || mods[0].Scale.Name != "b.weight_scale" {
		t.Errorf("module b: %+v", mods[0])
	}
}

// Errors about a module are FormatErrors that name the file and tensor and
// wrap ErrConfig and formats.ErrFormat.
func TestDetectErrorKinds(t *testing.T) {
	m := newMemModel()
	m.add("a.comfy_quant", formats.U8, []int64{29}, []byte(`{"format": "int8_tensorwise"}`))
	m.add("a.weight", formats.I8, []int64{2, 16}, make([]byte, 32))
	m.add("a.weight_scale", formats.I32, []int64{2, 1}, make([]byte, 8))
	_, err := Detect(m)
	var fe *formats.FormatError
	if !errors.As(err, &fe) || fe.File != "mem.safetensors" || fe.Tensor != "a.weight_scale" ||
		!errors.Is(err, ErrConfig) || !errors.Is(err, formats.ErrFormat) {
		t.Errorf("Detect = %v (%#v)", err, fe)
	}
}

// TestDetectLegacyAndMetadata covers the two older layouts: a
// _quantization_metadata header and the scaled_fp8 marker tensor.
func TestDetectLegacyAndMetadata(t *testing.T) {
	m := newMemModel()
	m.Meta = formats.Metadata{{Key: SourceMetadata, Type: formats.TypeString,
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
	mods, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 2 || mods[0].Name != "a" || mods[1].Name != "b" {
		t.Fatalf("modules: %+v", mods)
	}
	if mods[0].Source != SourceMetadata || mods[1].Source != SourceScaledFP8 || mods[1].Config.Format != FormatFP8E4M3 {
		t.Errorf("sources: %s %s %s", mods[0].Source, mods[1].Source, mods[1].Config.Format)
	}
	if got := mods[1].Aux(); len(got) != 2 || got[0] != "b.scale_weight" || got[1] != "b.scale_input" {
		t.Errorf("legacy Aux() = %v", got)
	}
}

func TestDetectErrors(t *testing.T) {
	marker := func(s string) []byte { return []byte(s) }
	conv := `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16}`
	for _, c := range []struct {
		name  string
		build func(m *memModel)
		msg   string
	}{
		{"malformed marker", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{5}, marker(`{"for`))
		}, `tensor "a.comfy_quant": comfyquant: invalid comfy_quant marker`},
		{"marker not U8", func(m *memModel) {
			m.add("a.comfy_quant", formats.F32, []int64{1}, f32bytes(1))
		}, "must be U8"},
		{"marker 2-D", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{1, 29}, marker(`{"format": "int8_tensorwise"}`))
		}, "must be 1-D"},
		{"no weight", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{29}, marker(`{"format": "int8_tensorwise"}`))
		}, `no tensor "a.weight"`},
		{"weight dtype", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{27}, marker(`{"format": "float8_e4m3fn"}`))
			m.add("a.weight", formats.I8, []int64{2, 2}, make([]byte, 4))
			m.add("a.weight_scale", formats.F32, []int64{}, f32bytes(1))
		}, "needs f8_e4m3 weights, not i8"},
		{"no scale", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{29}, marker(`{"format": "int8_tensorwise"}`))
			m.add("a.weight", formats.I8, []int64{2, 2}, make([]byte, 4))
		}, `no tensor "a.weight_scale"`},
		{"convrot scalar scale", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{int64(len(conv))}, marker(conv))
			m.add("a.weight", formats.I8, []int64{2, 16}, make([]byte, 32))
			m.add("a.weight_scale", formats.F32, []int64{}, f32bytes(1))
		}, "convrot needs a scale per row"},
		{"scale rows", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{29}, marker(`{"format": "int8_tensorwise"}`))
			m.add("a.weight", formats.I8, []int64{2, 16}, make([]byte, 32))
			m.add("a.weight_scale", formats.F32, []int64{3, 1}, f32bytes(1, 1, 1))
		}, "scale shape [3 1]"},
		{"scale dtype", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{29}, marker(`{"format": "int8_tensorwise"}`))
			m.add("a.weight", formats.I8, []int64{2, 16}, make([]byte, 32))
			m.add("a.weight_scale", formats.I32, []int64{2, 1}, make([]byte, 8))
		}, "scale type i32"},
		{"group does not divide", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{int64(len(conv))}, marker(conv))
			m.add("a.weight", formats.I8, []int64{2, 20}, make([]byte, 40))
			m.add("a.weight_scale", formats.F32, []int64{2, 1}, f32bytes(1, 1))
		}, "row length 20 is not divisible by convrot_groupsize 16"},
		{"weight 1-D", func(m *memModel) {
			m.add("a.comfy_quant", formats.U8, []int64{29}, marker(`{"format": "int8_tensorwise"}`))
			m.add("a.weight", formats.I8, []int64{16}, make([]byte, 16))
		}, "not a 2-D"},
		{"bad metadata", func(m *memModel) {
			m.Meta = formats.Metadata{{Key: SourceMetadata, Type: formats.TypeString, Value: `{"layers": [`}}
		}, `metadata "_quantization_metadata"`},
		{"bad metadata layer", func(m *memModel) {
			m.Meta = formats.Metadata{{Key: SourceMetadata, Type: formats.TypeString,
				Value: `{"layers": {"a": {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 512}}}`}}
		}, `layer "a"`},
	} {
		m := newMemModel()
		c.build(m)
		_, err := Detect(m)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: Detect = %v, want an error containing %q", c.name, err, c.msg)
		}
	}
	// A .weight.comfy_quant key is ignored, as ComfyUI ignores it.
	m := newMemModel()
	m.add("a.weight.comfy_quant", formats.U8, []int64{5}, []byte(`{"for`))
	if mods, err := Detect(m); err != nil || len(mods) != 0 {
		t.Errorf(".weight.comfy_quant: %v, %v", mods, err)
	}
}

// TestDetectUnsupported: modules in formats this package cannot decode are
// listed (in file order) and marked.
func TestDetectUnsupported(t *testing.T) {
	m := newMemModel()
	m.Meta = formats.Metadata{{Key: SourceMetadata, Type: formats.TypeString,
		Value: `{"layers": {"z": {"format": "awq_w4a16"}}}`}}
	m.add("a.weight", formats.U8, []int64{2, 8}, make([]byte, 16))
	m.add("a.weight_scale", formats.F8_E4M3, []int64{2, 1}, make([]byte, 2))
	m.add("a.weight_scale_2", formats.F32, []int64{}, f32bytes(1))
	m.add("a.comfy_quant", formats.U8, []int64{27}, []byte(`{"format": "svdquant_w4a4"}`))
	m.add("b.comfy_quant", formats.U8, []int64{29}, []byte(`{"format": "int8_tensorwise"}`))
	m.add("b.weight", formats.I8, []int64{1, 4}, make([]byte, 4))
	m.add("b.weight_scale", formats.F32, []int64{1, 1}, f32bytes(1))
	mods, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 3 || mods[0].Name != "a" || mods[1].Name != "b" || mods[2].Name != "z" {
		t.Fatalf("modules %+v, want a, b, z", mods)
	}
	if !mods[0].Unsupported || mods[0].Config.Format != "svdquant_w4a4" || mods[1].Unsupported || !mods[2].Unsupported || mods[2].Source != SourceMetadata {
		t.Errorf("unsupported flags/formats: %+v", mods)
	}
	if got := mods[0].Aux(); len(got) != 1 || got[0] != "a.comfy_quant" {
		t.Errorf("Aux of an unsupported module = %v, want the marker", got)
	}
	if _, err := ParseQuantConfig([]byte(`{"format": "svdquant_w4a4", "act_unsigned": 7}`)); !errors.Is(err, ErrUnsupportedFormat) {
		t.Errorf("svdquant_w4a4 with its own keys: %v, want ErrUnsupportedFormat first", err)
	}
}

package comfyquant

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// TestBlockMarkers: each new format's marker is written as ComfyUI's
// state_dict writes it and parses back to the same config; the "params"
// form and defaults are read as ComfyUI's loader reads them.
func TestBlockMarkers(t *testing.T) {
	for _, c := range []struct {
		cfg  QuantConfig
		json string
	}{
		{QuantConfig{Format: FormatNVFP4}, `{"format": "nvfp4"}`},
		{QuantConfig{Format: FormatMXFP8, FullPrecisionMatMul: true}, `{"format": "mxfp8", "full_precision_matrix_mult": true}`},
		{QuantConfig{Format: FormatW4A4, GroupSize: 64}, `{"format": "convrot_w4a4", "convrot_groupsize": 64}`},
		{QuantConfig{Format: FormatW4A4, GroupSize: 256, LinearDType: "int8"}, `{"format": "convrot_w4a4", "convrot_groupsize": 256, "linear_dtype": "int8"}`},
		{QuantConfig{Format: FormatW4A8, GroupSize: 256, QuantGroupSize: 16}, `{"format": "asym_w4a8_int8", "group_size": 16, "convrot_groupsize": 256}`},
	} {
		b, err := MarshalQuantConfig(c.cfg)
		if err != nil || string(b) != c.json {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", c.cfg, b, err, c.json)
		}
		got, err := ParseQuantConfig([]byte(c.json))
		if err != nil || got.String() != c.cfg.String() {
			t.Errorf("Parse(%s) = %+v, %v", c.json, got, err)
		}
	}
	for in, want := range map[string]QuantConfig{
		`{"format": "asym_w4a8_int8"}`: {Format: FormatW4A8, GroupSize: 256, QuantGroupSize: 16},
		`{"format": "asym_w4a8_int8", "params": {"group_size": 32, "convrot_groupsize": 64}}`: {Format: FormatW4A8, GroupSize: 64, QuantGroupSize: 32},
		`{"format": "convrot_w4a4", "convrot": true}`:                                         {Format: FormatW4A4, GroupSize: 256, Unknown: []string{"convrot"}},
	} {
		got, err := ParseQuantConfig([]byte(in))
		if err != nil || got.String() != want.String() || !slices.Equal(got.Unknown, want.Unknown) {
			t.Errorf("Parse(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
}

// TestDetectBlockModules: a well-formed module of each format is found with
// all its tensors; a wrong scale shape or dtype is an error naming the tensor.
func TestDetectBlockModules(t *testing.T) {
	m := newMemModel()
	m.add("a.weight", formats.U8, []int64{16, 16}, make([]byte, 256))
	m.add("a.weight_scale", formats.F8_E4M3, []int64{128, 4}, make([]byte, 512))
	m.add("a.weight_scale_2", formats.F32, []int64{}, f32bytes(1))
	m.add("a.comfy_quant", formats.U8, []int64{19}, []byte(`{"format": "nvfp4"}`))
	m.add("b.weight", formats.I8, []int64{4, 128}, make([]byte, 512))
	m.add("b.weight_s_rel", formats.U8, []int64{4, 16}, make([]byte, 64))
	m.add("b.weight_s_channel", formats.F32, []int64{4}, f32bytes(1, 1, 1, 1))
	m.add("b.weight_codebook", formats.F32, []int64{16}, make([]byte, 64))
	marker := `{"format": "asym_w4a8_int8", "convrot_groupsize": 64}`
	m.add("b.comfy_quant", formats.U8, []int64{int64(len(marker))}, []byte(marker))
	mods, err := Detect(m)
	if err != nil || len(mods) != 2 {
		t.Fatalf("Detect: %v, %v", mods, err)
	}
	if got := mods[0].Aux(); !slices.Equal(got, []string{"a.weight_scale", "a.weight_scale_2", "a.comfy_quant"}) {
		t.Errorf("nvfp4 aux %v", got)
	}
	if got := mods[1].Aux(); !slices.Equal(got, []string{"b.weight_s_rel", "b.weight_s_channel", "b.weight_codebook", "b.comfy_quant"}) {
		t.Errorf("w4a8 aux %v", got)
	}
	if !slices.Equal(mods[1].Shape(), []int64{4, 256}) {
		t.Errorf("w4a8 logical shape %v", mods[1].Shape())
	}

	bad := newMemModel()
	bad.add("a.weight", formats.U8, []int64{16, 16}, make([]byte, 256))
	bad.add("a.weight_scale", formats.F8_E4M3, []int64{16, 2}, make([]byte, 32)) // not swizzled
	bad.add("a.weight_scale_2", formats.F32, []int64{}, f32bytes(1))
	bad.add("a.comfy_quant", formats.U8, []int64{19}, []byte(`{"format": "nvfp4"}`))
	if _, err := Detect(bad); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "a.weight_scale") {
		t.Errorf("unswizzled nvfp4 scales: %v", err)
	}
	bad = newMemModel()
	bad.add("a.weight", formats.I8, []int64{16, 16}, make([]byte, 256)) // nvfp4 weights are U8
	bad.add("a.comfy_quant", formats.U8, []int64{19}, []byte(`{"format": "nvfp4"}`))
	if _, err := Detect(bad); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "needs u8") {
		t.Errorf("I8 nvfp4 weight: %v", err)
	}
}

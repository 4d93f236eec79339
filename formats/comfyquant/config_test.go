package comfyquant

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestMarshalQuantConfigBytes pins the exact marker bytes: Python json.dumps
// layout with its default separators, keys in a fixed order.
func TestMarshalQuantConfigBytes(t *testing.T) {
	for _, c := range []struct {
		cfg  QuantConfig
		want string
	}{
		{QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 256},
			`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`},
		{QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 16},
			`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 16}`},
		{QuantConfig{Format: FormatInt8}, `{"format": "int8_tensorwise"}`},
		{QuantConfig{Format: FormatFP8E4M3}, `{"format": "float8_e4m3fn"}`},
		{QuantConfig{Format: FormatFP8E5M2}, `{"format": "float8_e5m2"}`},
		{QuantConfig{Format: FormatFP8E4M3, FullPrecisionMatMul: true},
			`{"format": "float8_e4m3fn", "full_precision_matrix_mult": true}`},
		{QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 1024, FullPrecisionMatMul: true, Unknown: []string{"per_row"}},
			`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 1024, "full_precision_matrix_mult": true}`},
	} {
		got, err := MarshalQuantConfig(c.cfg)
		if err != nil {
			t.Fatalf("MarshalQuantConfig(%+v): %v", c.cfg, err)
		}
		if string(got) != c.want {
			t.Errorf("MarshalQuantConfig(%+v)\n got %s\nwant %s", c.cfg, got, c.want)
		}
		back, err := ParseQuantConfig(got)
		if err != nil {
			t.Fatalf("ParseQuantConfig(%s): %v", got, err)
		}
		c.cfg.Unknown = nil
		if !reflect.DeepEqual(back, c.cfg) {
			t.Errorf("round trip of %s = %+v, want %+v", got, back, c.cfg)
		}
	}
	for _, bad := range []QuantConfig{
		{Format: "svdquant_w4a4"},
		{Format: ""},
		{Format: FormatInt8, Convrot: true, GroupSize: 512},
		{Format: FormatInt8, Convrot: true},
		{Format: FormatFP8E4M3, Convrot: true, GroupSize: 256},
		{Format: FormatInt8, GroupSize: 256},
	} {
		if b, err := MarshalQuantConfig(bad); err == nil {
			t.Errorf("MarshalQuantConfig(%+v) = %s, want an error", bad, b)
		}
	}
}

func TestParseQuantConfig(t *testing.T) {
	for _, c := range []struct {
		in   string
		want QuantConfig
	}{
		// What ComfyUI's own writers and convert_to_quant store.
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`,
			QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 256}},
		{`{"format":"int8_tensorwise","convrot":true,"convrot_groupsize":64}`,
			QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 64}},
		{"  {\n\"convrot_groupsize\": 4, \"convrot\": true, \"format\": \"int8_tensorwise\"}\n",
			QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 4}},
		// convrot without a group size takes the kitchen's default.
		{`{"format": "int8_tensorwise", "convrot": true}`,
			QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 256}},
		// A group size without convrot is ignored, even an invalid one.
		{`{"format": "int8_tensorwise", "convrot": false, "convrot_groupsize": 512}`,
			QuantConfig{Format: FormatInt8}},
		{`{"format": "int8_tensorwise", "convrot": null}`, QuantConfig{Format: FormatInt8}},
		{`{"format": "float8_e5m2", "full_precision_matrix_mult": true}`,
			QuantConfig{Format: FormatFP8E5M2, FullPrecisionMatMul: true}},
		// Nested params (older convert_to_quant), and top level winning over them.
		{`{"format": "int8_tensorwise", "params": {"convrot": true, "convrot_groupsize": 1024}}`,
			QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 1024}},
		{`{"format": "int8_tensorwise", "convrot_groupsize": 16, "params": {"convrot": true, "convrot_groupsize": 1024}}`,
			QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 16}},
		{`{"format": "int8_tensorwise", "convrot": false, "params": {"convrot": true}}`,
			QuantConfig{Format: FormatInt8}},
		// Unknown keys are tolerated and listed.
		{`{"format": "int8_tensorwise", "per_row": true, "convrot": true, "convrot_groupsize": 256, "params": {"x": 1}}`,
			QuantConfig{Format: FormatInt8, Convrot: true, GroupSize: 256, Unknown: []string{"params.x", "per_row"}}},
		// A repeated key takes its last value, as json.loads does.
		{`{"format": "float8_e4m3fn", "format": "int8_tensorwise"}`, QuantConfig{Format: FormatInt8}},
	} {
		got, err := ParseQuantConfig([]byte(c.in))
		if err != nil {
			t.Errorf("ParseQuantConfig(%s): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseQuantConfig(%s) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestParseQuantConfigRejects(t *testing.T) {
	for _, c := range []struct {
		in, msg string
	}{
		{``, "not a JSON object"},
		{`null`, "not a JSON object"},
		{`[]`, "not a JSON object"},
		{`"int8_tensorwise"`, "not a JSON object"},
		{`{"format": "int8_tensorwise"`, "not a JSON object"},
		{`{"format": "int8_tensorwise"} {}`, "data after"},
		{`{"format": "int8_tensorwise"}x`, "data after"},
		{`{}`, `no "format"`},
		{`{"params": {"format": "int8_tensorwise"}}`, `no "format"`},
		{`{"format": 8}`, "not a string"},
		{`{"format": "int8_tensorwise", "convrot": 1}`, "not true or false"},
		{`{"format": "int8_tensorwise", "convrot": "true"}`, "not true or false"},
		{`{"format": "int8_tensorwise", "full_precision_matrix_mult": 0}`, "not true or false"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 512}`, "power of two but not of four"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 2048}`, "power of two but not of four"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 100}`, "not a power of four"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 0}`, "outside"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": -256}`, "outside"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256.0}`, "not an integer"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256.5}`, "not an integer"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 2.56e2}`, "not an integer"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": "256"}`, "not an integer"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 99999999999999999999999}`, "not an integer"},
		{`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": null}`, "not an integer"},
		{`{"format": "float8_e4m3fn", "convrot": true}`, "convrot needs format"},
		{`{"format": "int8_tensorwise", "params": 3}`, `"params"`},
		{"{\"format\": \"int8_tensorwise\xff\"}", "UTF-8"},
		{`{"format": "svdquant_w4a4"}`, "unsupported"},
		{`{"format": "nvfp4", "convrot": true}`, "convrot needs format"},
		{`{"format": "asym_w4a8_int8", "group_size": 3}`, "group_size 3"},
		{`{"format": "convrot_w4a4", "convrot_groupsize": 512}`, "not of four"},
		{`{"format": "convrot_w4a4", "linear_dtype": "fp8"}`, "linear_dtype"},
		{`{"format": "INT8_TENSORWISE"}`, "unsupported"},
	} {
		_, err := ParseQuantConfig([]byte(c.in))
		if err == nil {
			t.Errorf("ParseQuantConfig(%q) succeeded, want an error containing %q", c.in, c.msg)
			continue
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseQuantConfig(%q) = %q, want it to contain %q", c.in, err, c.msg)
		}
		if !errors.Is(err, ErrConfig) && !errors.Is(err, ErrUnsupportedFormat) {
			t.Errorf("ParseQuantConfig(%q) = %v, wraps neither ErrConfig nor ErrUnsupportedFormat", c.in, err)
		}
	}
	if _, err := ParseQuantConfig([]byte(`{"format": "awq_w4a16"}`)); !errors.Is(err, ErrUnsupportedFormat) {
		t.Errorf("awq_w4a16: %v, want ErrUnsupportedFormat", err)
	}
	big := `{"format": "int8_tensorwise", "pad": "` + strings.Repeat("x", MaxMarkerSize) + `"}`
	if _, err := ParseQuantConfig([]byte(big)); err == nil || !errors.Is(err, ErrConfig) {
		t.Errorf("oversized marker: %v", err)
	}
}

func TestQuantConfigString(t *testing.T) {
	for c, want := range map[*QuantConfig]string{
		{Format: FormatInt8, Convrot: true, GroupSize: 256}: "int8_tensorwise convrot G=256",
		{Format: FormatInt8}: "int8_tensorwise",
		{Format: FormatFP8E5M2, FullPrecisionMatMul: true}: "float8_e5m2 full_precision_matrix_mult",
	} {
		if got := c.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", *c, got, want)
		}
	}
}

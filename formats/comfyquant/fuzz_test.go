package comfyquant

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzParseQuantConfig feeds arbitrary bytes to the marker parser: it must
// never panic, every error must wrap ErrConfig or ErrUnsupportedFormat, and
// an accepted config must survive MarshalQuantConfig and parse back to the
// same settings.
func FuzzParseQuantConfig(f *testing.F) {
	for _, s := range []string{
		`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`,
		`{"format": "int8_tensorwise"}`,
		`{"format": "float8_e4m3fn"}`,
		`{"format": "float8_e5m2", "full_precision_matrix_mult": true}`,
		`{"format": "int8_tensorwise", "params": {"convrot": true, "convrot_groupsize": 64}}`,
		`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 512}`,
		`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256.0}`,
		`{"format": "nvfp4", "per_row": true}`,
		`{"format": "mxfp8"}`,
		`{"format": "convrot_w4a4", "convrot_groupsize": 64, "linear_dtype": "int8"}`,
		`{"format": "asym_w4a8_int8", "params": {"group_size": 32, "convrot_groupsize": 16}}`,
		`{"format": "asym_w4a8_int8", "group_size": 5}`,
		`{"format": "int8_tensorwise"} trailing`,
		``, `null`, `[]`, `{"params": null, "format": "int8_tensorwise"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseQuantConfig(data)
		if err != nil {
			if !errors.Is(err, ErrConfig) && !errors.Is(err, ErrUnsupportedFormat) {
				t.Fatalf("ParseQuantConfig(%q) = %v: wraps neither sentinel", data, err)
			}
			return
		}
		b, err := MarshalQuantConfig(c)
		if err != nil {
			t.Fatalf("ParseQuantConfig(%q) = %+v, which does not marshal: %v", data, c, err)
		}
		back, err := ParseQuantConfig(b)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", b, err)
		}
		c.Unknown = nil
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("ParseQuantConfig(%q) = %+v, after marshal %+v", data, c, back)
		}
	})
}

package pipeline

import (
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func TestParseValue(t *testing.T) {
	for _, c := range []struct {
		typ  string
		in   string
		want any
		err  string
	}{
		{"u8", "255", uint8(255), ""},
		{"u8", "256", nil, "value out of range"},
		{"i8", "-128", int8(-128), ""},
		{"u16", "0x10", uint16(16), ""},
		{"i16", "-1", int16(-1), ""},
		{"u32", "-1", nil, "not a u32"},
		{"i32", "2147483647", int32(2147483647), ""},
		{"u64", "18446744073709551615", uint64(18446744073709551615), ""},
		{"i64", "-9", int64(-9), ""},
		{"f32", "0.5", float32(0.5), ""},
		{"F64", "1e300", 1e300, ""},
		{"bool", "true", true, ""},
		{"bool", "yes", nil, "not a bool"},
		{"string", "wan", "wan", ""},
		{"array", "1", nil, "want u8"},
	} {
		typ, err := ParseValueType(c.typ)
		var v any
		if err == nil {
			v, err = ParseValue(typ, c.in)
		}
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s %q: error %v, want %q", c.typ, c.in, err, c.err)
		case c.err == "" && (err != nil || v != c.want):
			t.Errorf("%s %q: %v (%T), %v; want %v (%T)", c.typ, c.in, v, v, err, c.want, c.want)
		}
	}
	if _, err := ParseValue(formats.TypeArray, "[1]"); err == nil {
		t.Error("an array value was parsed")
	}
}

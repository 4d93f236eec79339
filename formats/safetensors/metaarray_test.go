package safetensors

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// A GGUF array of every element type written into __metadata__ reads back
// as the same typed array, exactly (float32 values whose shortest text is
// long included); a plain string that merely looks like JSON stays a string.
func TestMetadataArraysRoundTrip(t *testing.T) {
	arrays := map[string]formats.Array{
		"u8":     {Elem: formats.TypeUint8, Values: []uint8{0, 1, 255, 7}},
		"i8":     {Elem: formats.TypeInt8, Values: []int8{-128, 0, 127}},
		"u16":    {Elem: formats.TypeUint16, Values: []uint16{0, 65535}},
		"i16":    {Elem: formats.TypeInt16, Values: []int16{-32768, 5}},
		"u32":    {Elem: formats.TypeUint32, Values: []uint32{0, math.MaxUint32}},
		"i32":    {Elem: formats.TypeInt32, Values: []int32{1, 2, 6, -1}},
		"f32":    {Elem: formats.TypeFloat32, Values: []float32{-11.123456, 0, 1e-30, math.MaxFloat32, float32(math.Pi)}},
		"bool":   {Elem: formats.TypeBool, Values: []bool{true, false}},
		"string": {Elem: formats.TypeString, Values: []string{"▁the", "</s>", `"quoted"\`, "<0x0A>", ""}},
		"u64":    {Elem: formats.TypeUint64, Values: []uint64{math.MaxUint64}},
		"i64":    {Elem: formats.TypeInt64, Values: []int64{math.MinInt64}},
		"f64":    {Elem: formats.TypeFloat64, Values: []float64{0.1, -2.5e300}},
	}
	var meta formats.Metadata
	for k, a := range arrays {
		meta = append(meta, formats.KV{Key: "tokenizer.ggml." + k, Type: formats.TypeArray, Value: a})
	}
	plain := `{"gguf_array": not json`
	meta = append(meta, formats.KV{Key: "note", Type: formats.TypeString, Value: plain})
	sm, err := stringMetadata("t.safetensors", meta)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := writeAll(t, []formats.Tensor{{Name: "w", Type: formats.F32, Shape: []int64{2}}}, sm, nil)
	f, err := Parse(bytes.NewReader(b), int64(len(b)), "t.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range arrays {
		kv, ok := f.Metadata().Get("tokenizer.ggml." + k)
		if !ok || kv.Type != formats.TypeArray || !reflect.DeepEqual(kv.Value, want) {
			t.Errorf("%s: read back %#v, want %#v", k, kv.Value, want)
		}
	}
	if v, ok := f.Metadata().String("note"); !ok || v != plain {
		t.Errorf("a string that is not an array text came back as %#v", v)
	}
}

// Arrays whose text could not hold them exactly are refused by name.
func TestArrayTextRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    formats.Array
		want string
	}{
		{"nested", formats.Array{Elem: formats.TypeArray, Values: []formats.Array{}}, "nested"},
		{"invalid UTF-8", formats.Array{Elem: formats.TypeString, Values: []string{"ok", "\xff"}}, "string 1 is not valid UTF-8"},
		{"NaN", formats.Array{Elem: formats.TypeFloat32, Values: []float32{float32(math.NaN())}}, "NaN"},
	} {
		if _, err := ArrayText(tc.a); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

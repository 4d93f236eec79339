package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/sdtool/sdtool/formats"
)

// arrayTag opens the text of a GGUF array stored in __metadata__, whose
// values are strings only: {"gguf_array":"ELEM","values":[...]}, ELEM being
// formats.ValueType's name of the element type (u8 values are base64, as
// encoding/json writes bytes). The reader turns such a value back into the
// array, so a tokenizer under tokenizer.ggml.* survives a safetensors file;
// other readers see JSON text.
const arrayTag = `{"gguf_array":`

// arrayText is the JSON form of an array value.
type arrayText struct {
	Elem   string          `json:"gguf_array"`
	Values json.RawMessage `json:"values"`
}

// ArrayText returns a as the __metadata__ string the reader turns back into
// a; an error for nested arrays, non-finite floats and strings that are not
// valid UTF-8, which the text could not hold exactly.
func ArrayText(a formats.Array) (string, error) {
	if a.Elem == formats.TypeArray {
		return "", errors.New("a nested array has no text form")
	}
	if ss, ok := a.Values.([]string); ok {
		for i, s := range ss {
			if !utf8.ValidString(s) {
				return "", fmt.Errorf("string %d is not valid UTF-8", i)
			}
		}
	}
	vals, err := json.Marshal(a.Values)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(arrayText{Elem: a.Elem.String(), Values: vals})
	return string(b), err
}

// elemSlice maps an element type to a pointer to an empty slice of its Go type.
func elemSlice(t formats.ValueType) any {
	switch t {
	case formats.TypeUint8:
		return new([]uint8)
	case formats.TypeInt8:
		return new([]int8)
	case formats.TypeUint16:
		return new([]uint16)
	case formats.TypeInt16:
		return new([]int16)
	case formats.TypeUint32:
		return new([]uint32)
	case formats.TypeInt32:
		return new([]int32)
	case formats.TypeFloat32:
		return new([]float32)
	case formats.TypeBool:
		return new([]bool)
	case formats.TypeString:
		return new([]string)
	case formats.TypeUint64:
		return new([]uint64)
	case formats.TypeInt64:
		return new([]int64)
	case formats.TypeFloat64:
		return new([]float64)
	}
	return nil
}

// parseArrayText returns the array that ArrayText wrote as s; false when s
// is not such a text (it then stays a string).
func parseArrayText(s string) (formats.Array, bool) {
	if !strings.HasPrefix(s, arrayTag) {
		return formats.Array{}, false
	}
	var at arrayText
	if err := json.Unmarshal([]byte(s), &at); err != nil {
		return formats.Array{}, false
	}
	for t := formats.TypeUint8; t <= formats.TypeFloat64; t++ {
		if t.String() != at.Elem {
			continue
		}
		dst := elemSlice(t)
		if dst == nil || json.Unmarshal(at.Values, dst) != nil {
			return formats.Array{}, false
		}
		// dst is a *[]T; formats.Array holds the []T.
		return formats.Array{Elem: t, Values: reflect.ValueOf(dst).Elem().Interface()}, true
	}
	return formats.Array{}, false
}

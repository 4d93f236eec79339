package gguf

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// nestedArray returns n levels of arrays around one uint8.
func nestedArray(n int) formats.Array {
	a := formats.Array{Elem: formats.TypeUint8, Values: []uint8{1}}
	for i := 1; i < n; i++ {
		a = formats.Array{Elem: formats.TypeArray, Values: []formats.Array{a}}
	}
	return a
}

// TestArrayDepthAgrees: the writer accepts the nesting the reader accepts,
// 16 levels, and both refuse 17 (issue 14, item 13).
func TestArrayDepthAgrees(t *testing.T) {
	for _, n := range []int{maxArrayDepth, maxArrayDepth + 1} {
		meta := formats.Metadata{{Key: "deep", Type: formats.TypeArray, Value: nestedArray(n)}}
		_, werr := NewWriter(nil, nil, meta, nil)
		if (werr == nil) != (n <= maxArrayDepth) {
			t.Errorf("%d levels: writer says %v", n, werr)
		}
		if werr != nil {
			continue
		}
		b, _ := build(t, nil, meta, nil, nil)
		if _, err := parseBytes(b); err != nil {
			t.Errorf("%d levels: the reader refuses what the writer wrote: %v", n, err)
		}
	}
	// The reader on 17 levels written by hand.
	b := []byte("GGUF")
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = binary.LittleEndian.AppendUint64(b, 1)
	b = binary.LittleEndian.AppendUint64(b, 4)
	b = append(b, "deep"...)
	b = binary.LittleEndian.AppendUint32(b, uint32(formats.TypeArray))
	for range maxArrayDepth {
		b = binary.LittleEndian.AppendUint32(b, uint32(formats.TypeArray))
		b = binary.LittleEndian.AppendUint64(b, 1)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(formats.TypeUint8))
	b = binary.LittleEndian.AppendUint64(b, 1)
	b = append(b, 1)
	if _, err := parseBytes(b); err == nil || !strings.Contains(err.Error(), "nested more than 16 deep") {
		t.Errorf("17 levels read: %v", err)
	}
}

// emptyTensorAt is a GGUF file with one zero-size f32 tensor at relative
// offset off.
func emptyTensorAt(off uint64) []byte {
	b := []byte("GGUF")
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, 1)
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = binary.LittleEndian.AppendUint64(b, 1)
	b = append(b, 'e')
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 0) // f32
	b = binary.LittleEndian.AppendUint64(b, off)
	for len(b)%32 != 0 {
		b = append(b, 0)
	}
	return b
}

// TestEmptyTensorOffset: a zero-size tensor far past the data is refused
// instead of getting a negative absolute offset (issue 14, item 13).
func TestEmptyTensorOffset(t *testing.T) {
	f, err := parseBytes(emptyTensorAt(math.MaxInt64 - 31))
	if err == nil {
		t.Fatalf("accepted, offset %d", f.Tensors()[0].Offset)
	}
	if !strings.Contains(err.Error(), `tensor "e"`) || !strings.Contains(err.Error(), "past the end") {
		t.Errorf("error %v", err)
	}
	if f, err := parseBytes(emptyTensorAt(0)); err != nil || f.Tensors()[0].Offset < 0 {
		t.Errorf("empty tensor at 0: %v", err)
	}
}

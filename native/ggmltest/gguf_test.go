//go:build cgo

package ggmltest

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// ggufBytes builds a small GGUF v3 file by hand (independently of
// formats/gguf): three KVs and two tensors, data packed with alignment 32.
func ggufBytes(qOffset uint64) []byte {
	le := binary.LittleEndian
	var b []byte
	str := func(s string) { b = le.AppendUint64(b, uint64(len(s))); b = append(b, s...) }
	b = append(b, "GGUF"...)
	b = le.AppendUint32(b, 3)
	b = le.AppendUint64(b, 2) // tensors
	b = le.AppendUint64(b, 3) // kvs
	str("a.u32")
	b = le.AppendUint32(b, uint32(formats.TypeUint32))
	b = le.AppendUint32(b, 7)
	str("a.str")
	b = le.AppendUint32(b, uint32(formats.TypeString))
	str("hello")
	str("a.arr")
	b = le.AppendUint32(b, uint32(formats.TypeArray))
	b = le.AppendUint32(b, uint32(formats.TypeInt32))
	b = le.AppendUint64(b, 2)
	b = le.AppendUint32(b, uint32(0xFFFFFFFF)) // -1
	b = le.AppendUint32(b, 5)
	// f32 [3, 2] (ne 2, 3): 24 bytes, padded to 32.
	str("w")
	b = le.AppendUint32(b, 2)
	b = le.AppendUint64(b, 2)
	b = le.AppendUint64(b, 3)
	b = le.AppendUint32(b, uint32(formats.F32))
	b = le.AppendUint64(b, 0)
	// q8_0 ne [64]: 2 blocks of 34 bytes.
	str("q")
	b = le.AppendUint32(b, 1)
	b = le.AppendUint64(b, 64)
	b = le.AppendUint32(b, uint32(formats.Q8_0))
	b = le.AppendUint64(b, qOffset)
	for len(b)%32 != 0 {
		b = append(b, 0)
	}
	return append(b, make([]byte, 32+68)...)
}

func TestReadGGUF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.gguf")
	data := ggufBytes(32)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := ReadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != 3 || info.Alignment != 32 || info.DataOffset != int64(len(data)-100) {
		t.Errorf("header: version %d alignment %d data offset %d, want 3 32 %d", info.Version, info.Alignment, info.DataOffset, len(data)-100)
	}
	wantKV := []formats.KV{
		{Key: "a.u32", Type: formats.TypeUint32, Value: uint32(7)},
		{Key: "a.str", Type: formats.TypeString, Value: "hello"},
		{Key: "a.arr", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: []int32{-1, 5}}},
	}
	if !reflect.DeepEqual(info.KVs, wantKV) {
		t.Errorf("KVs = %+v, want %+v", info.KVs, wantKV)
	}
	wantT := []GGUFTensor{
		{Name: "w", Type: formats.F32, NE: [4]int64{2, 3, 1, 1}, Offset: 0, Size: 24},
		{Name: "q", Type: formats.Q8_0, NE: [4]int64{64, 1, 1, 1}, Offset: 32, Size: 68},
	}
	if !reflect.DeepEqual(info.Tensors, wantT) {
		t.Errorf("tensors = %+v, want %+v", info.Tensors, wantT)
	}
}

func TestReadGGUFRefuses(t *testing.T) {
	dir := t.TempDir()
	good := ggufBytes(32)
	cases := map[string][]byte{
		"magic":     append([]byte("GGUX"), good[4:]...),
		"truncated": good[:40],
		// Aligned and inside the file, but not packed in info order.
		"unpacked": ggufBytes(64),
	}
	for name, data := range cases {
		path := filepath.Join(dir, name+".gguf")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadGGUF(path); err == nil {
			t.Errorf("%s: ggml accepted the file", name)
		}
	}
	if _, err := ReadGGUF(filepath.Join(dir, "missing.gguf")); err == nil {
		t.Error("missing file: no error")
	}
}

package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
)

// manyTensors returns a GGUF holding n zero-size F32 tensors and no data.
func manyTensors(n int) []byte {
	var b bytes.Buffer
	le := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("GGUF")
	le(uint32(3))
	le(uint64(n))
	le(uint64(0))
	for i := range n {
		name := fmt.Sprintf("model.diffusion_model.blocks.%d.empty", i)
		le(uint64(len(name)))
		b.WriteString(name)
		le(uint32(1))
		le(uint64(0))
		le(uint32(0))
		le(uint64(0))
	}
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	return b.Bytes()
}

// TestHeaderMemoryBounded: a header of many tensors keeps at most a few
// times its own size in memory: names, one shape array, an index of
// positions, nothing per field.
func TestHeaderMemoryBounded(t *testing.T) {
	const n = 50_000
	data := manyTensors(n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := Parse(bytes.NewReader(data), int64(len(data)), "many.gguf")
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes kept, %d allocated per tensor; the file has %d a tensor", kept/n, allocated/n, len(data)/n)
	if per := kept / n; per > 200 {
		t.Errorf("%d bytes kept per tensor (file %d bytes a tensor), want at most 200", per, len(data)/n)
	}
	if per := allocated / n; per > 400 {
		t.Errorf("%d bytes allocated per tensor, want at most 400", per)
	}
	if f.Tensors()[n-1].Name != fmt.Sprintf("model.diffusion_model.blocks.%d.empty", n-1) {
		t.Error("wrong last tensor")
	}
	runtime.KeepAlive(f)
}

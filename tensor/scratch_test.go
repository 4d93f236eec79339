package tensor

import "testing"

// Numbered buffers keep their capacity, are independent of each other and
// of the reader's own, and Trim drops only the oversized ones.
func TestScratch(t *testing.T) {
	var s Scratch
	a := s.Bytes(0, 100)
	b := s.Bytes(2, 10)
	if len(a) != 100 || len(b) != 10 || len(s.bytes) != 3 {
		t.Fatalf("lengths %d %d, %d slots", len(a), len(b), len(s.bytes))
	}
	a[0] = 7
	if again := s.Bytes(0, 50); &again[0] != &a[0] || again[0] != 7 {
		t.Error("a smaller request reallocated buffer 0")
	}
	f := s.Float32s(1, 1000)
	s.raw, s.wide = make([]byte, 1<<20), make([]float32, 10)
	s.Trim(1000)
	if s.floats[1] != nil || s.raw != nil || s.bytes[0] == nil || s.wide == nil {
		t.Errorf("Trim(1000): floats[1] %d, raw %d, bytes[0] %d, wide %d", cap(s.floats[1]), cap(s.raw), cap(s.bytes[0]), cap(s.wide))
	}
	if len(f) != 1000 {
		t.Errorf("float buffer of %d", len(f))
	}
}

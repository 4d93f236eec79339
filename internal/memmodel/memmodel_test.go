package memmodel

import (
	"errors"
	"io"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

var _ formats.Model = (*Model)(nil)

// Reads return the added bytes from any offset, EOF past them, and the
// injected error or a missing tensor's error.
func TestReads(t *testing.T) {
	m := New("in.mem", "mem")
	a := m.Add("a", formats.U8, []int64{4}, []byte{1, 2, 3, 4})
	if a.File != "in.mem" || a.Size != 4 || len(m.Tensors()) != 1 || m.Info().Format != "mem" {
		t.Fatalf("descriptor %+v, info %+v", a, m.Info())
	}
	p := make([]byte, 3)
	if n, err := m.ReadTensorAt(&a, p, 2); n != 2 || err != io.EOF || p[0] != 3 || p[1] != 4 {
		t.Errorf("read from 2: %d %v %v", n, err, p)
	}
	if n, err := m.ReadTensorAt(&a, p, 1); n != 3 || err != nil || p[2] != 4 {
		t.Errorf("read from 1: %d %v %v", n, err, p)
	}
	boom := errors.New("boom")
	m.ReadErr["a"] = boom
	if _, err := m.ReadTensorAt(&a, p, 0); err != boom {
		t.Errorf("injected error: %v", err)
	}
	if _, err := m.ReadTensorAt(&formats.Tensor{Name: "b"}, p, 0); err == nil {
		t.Error("a missing tensor reads")
	}
}

package gguf

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// A file cut inside its tensor data is refused with a *formats.TruncatedError
// that names the cut tensors in data order and the sizes, and carries the
// whole header; after Open closed the file, the header still reads the
// data that is there (issue 34, item 20).
func TestTruncated(t *testing.T) {
	// Three f32 tensors: b's data comes first, then a's, then the empty e
	// at the end of the data, where writers put empty tensors.
	whole := head(3, 1)
	kvU32(whole, "general.alignment", 32)
	whole.info("a", formats.F32, 64, 16).info("b", formats.F32, 0, 16).info("e", formats.F32, 128, 0)
	data := whole.data(128)
	for i := range data[len(data)-128:] {
		data[len(data)-128+i] = byte(i)
	}
	dataOffset := int64(len(data) - 128)
	size := dataOffset + 64 + 10 // a cut 10 bytes into a
	path := filepath.Join(t.TempDir(), "cut.gguf")
	if err := os.WriteFile(path, data[:size], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	var te *formats.TruncatedError
	if f != nil || !errors.As(err, &te) || !errors.Is(err, formats.ErrTruncated) || !errors.Is(err, ErrFormat) {
		t.Fatalf("Open: %v, %v", f, err)
	}
	if te.Size != size || te.Want != dataOffset+128 || te.Missing() != 128-74 || len(te.Cut) != 1 || te.Cut[0] != "a" || te.Tensors != 3 {
		t.Errorf("truncation %+v", te)
	}
	h := te.Header
	if h == nil || len(h.Tensors()) != 3 || len(h.Metadata()) != 1 || len(h.Info().Warnings) == 0 || h.Info().Warnings[0] != te.Warning() {
		t.Fatalf("header %v", h)
	}
	b, _ := formats.Find(h, "b")
	got, err := formats.ReadTensor(h, &b)
	if err != nil || got[63] != 63 {
		t.Errorf("reading b, which is whole: %v, %v", got, err)
	}
	a, _ := formats.Find(h, "a")
	if _, err := formats.ReadTensor(h, &a); err == nil {
		t.Error("reading a, which is cut, succeeded")
	}
	if err := h.Close(); err != nil {
		t.Error(err)
	}

	// A file that ends with its header cuts every tensor with data.
	if _, err := parseBytes(data[:dataOffset]); !errors.As(err, &te) || len(te.Cut) != 2 || te.Cut[0] != "b" {
		t.Errorf("cut in the padding: %v", err)
	}
	// The whole file opens.
	if g, err := parseBytes(data); err != nil || len(g.Tensors()) != 3 {
		t.Errorf("whole file: %v", err)
	}
}

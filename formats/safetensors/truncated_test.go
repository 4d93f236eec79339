package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// A file cut inside its tensor data is refused with a *formats.TruncatedError
// that names the cut tensors in data order (not header order) and the
// sizes, and carries the whole header, which still reads the data that is
// there after Open closed the file (issue 34, item 20).
func TestTruncated(t *testing.T) {
	data := make([]byte, 24)
	for i := range data {
		data[i] = byte(i)
	}
	header := `{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},` +
		`"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"c":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`
	b := raw(header, data)
	start := int64(len(b) - len(data))
	path := filepath.Join(t.TempDir(), "cut.safetensors")
	if err := os.WriteFile(path, b[:start+12], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	var te *formats.TruncatedError
	if f != nil || !errors.As(err, &te) || !errors.Is(err, formats.ErrTruncated) || !errors.Is(err, ErrFormat) {
		t.Fatalf("Open: %v, %v", f, err)
	}
	if te.Size != start+12 || te.Want != start+24 || te.Missing() != 12 || len(te.Cut) != 2 || te.Cut[0] != "c" || te.Cut[1] != "a" {
		t.Errorf("truncation %+v", te)
	}
	h := te.Header
	if h == nil || len(h.Tensors()) != 3 || len(h.Metadata()) != 1 || h.Info().Warnings[0] != te.Warning() {
		t.Fatalf("header %v", h)
	}
	tb, _ := formats.Find(h, "b")
	if got, err := formats.ReadTensor(h, &tb); err != nil || got[7] != 7 {
		t.Errorf("reading b, which is whole: %v, %v", got, err)
	}
	tc, _ := formats.Find(h, "c")
	if _, err := formats.ReadTensor(h, &tc); err == nil {
		t.Error("reading c, which is cut, succeeded")
	}
	// Offsets that no file can hold are still a plain format error.
	huge := raw(`{"t":{"dtype":"U8","shape":[9223372036854775800],"data_offsets":[0,9223372036854775800]}}`, nil)
	if _, err := parseBytes(huge, "huge.safetensors"); err == nil || errors.Is(err, formats.ErrTruncated) {
		t.Errorf("offsets past any file: %v", err)
	}
}

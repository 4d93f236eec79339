package formats_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	_ "github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
)

// Every registered extension writes a file that Open reads back with the
// same tensors and metadata.
func TestCreateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	tensors := []formats.Tensor{
		{Name: "a.weight", Type: formats.F32, Shape: []int64{2, 3}},
		{Name: "b.bias", Type: formats.F16, Shape: []int64{4}},
	}
	meta := formats.Metadata{{Key: "general.name", Type: formats.TypeString, Value: "tiny"}}
	for _, name := range []string{"x.gguf", "x.safetensors", "UPPER.GGUF"} {
		path := filepath.Join(dir, name)
		c, err := formats.CreatorFor(path)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		w, err := c.New(&buf, tensors, formats.WriteOptions{Name: path, Metadata: meta})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range w.Layout() {
			if _, err := w.Write(make([]byte, l.Size)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := formats.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if m.Info().Format != c.Name {
			t.Errorf("%s: written as %s, read as %s", name, c.Name, m.Info().Format)
		}
		if got := m.Tensors(); len(got) != 2 || got[0].Name != "a.weight" || got[1].Type != formats.F16 {
			t.Errorf("%s: tensors %+v", name, got)
		}
		if v, _ := m.Metadata().String("general.name"); v != "tiny" {
			t.Errorf("%s: metadata %v", name, m.Metadata())
		}
		m.Close()
	}
}

func TestCreatorForUnknown(t *testing.T) {
	for _, path := range []string{"out.bin", "out"} {
		_, err := formats.CreatorFor(path)
		if !errors.Is(err, formats.ErrFormat) || !strings.Contains(err.Error(), ".gguf or .safetensors") || !strings.HasPrefix(err.Error(), path+": ") {
			t.Errorf("%s: %v", path, err)
		}
	}
	if c, ok := formats.CreatorNamed("safetensors"); !ok || c.Ext != ".safetensors" {
		t.Errorf("CreatorNamed(safetensors) = %+v, %v", c, ok)
	}
}

func TestCreatorStores(t *testing.T) {
	g, _ := formats.CreatorNamed("gguf")
	s, _ := formats.CreatorNamed("safetensors")
	for _, c := range []struct {
		t        formats.DType
		gguf, st bool
	}{
		{formats.Q4_K, true, false}, {formats.F16, true, true}, {formats.F8_E4M3, false, true}, {formats.U8, false, true},
	} {
		if g.Stores(c.t) != c.gguf || s.Stores(c.t) != c.st {
			t.Errorf("%s: gguf %v safetensors %v, want %v %v", c.t, g.Stores(c.t), s.Stores(c.t), c.gguf, c.st)
		}
	}
}

// Safetensors metadata holds strings only; anything else is refused by name.
func TestCreateSafetensorsMetadata(t *testing.T) {
	c, _ := formats.CreatorNamed("safetensors")
	meta := formats.Metadata{{Key: "n", Type: formats.TypeUint32, Value: uint32(1)}}
	_, err := c.New(&bytes.Buffer{}, nil, formats.WriteOptions{Name: "o.safetensors", Metadata: meta})
	if err == nil || !strings.Contains(err.Error(), `o.safetensors: metadata "n" is u32`) {
		t.Errorf("got %v", err)
	}
}

func TestFormatError(t *testing.T) {
	pkg := formats.Sentinel("x: invalid file", formats.ErrFormat)
	err := error(&formats.FormatError{File: "m.x", Tensor: "w", Msg: "too short", Err: pkg})
	if err.Error() != `m.x: tensor "w": too short` {
		t.Errorf("message %q", err)
	}
	if !errors.Is(err, pkg) || !errors.Is(err, formats.ErrFormat) || errors.Is(err, formats.ErrIncomplete) {
		t.Errorf("%v unwraps wrongly", err)
	}
	plain := &formats.FormatError{File: "m.x", Msg: "bad header"}
	if plain.Error() != "m.x: bad header" || !errors.Is(plain, formats.ErrFormat) {
		t.Errorf("%v", plain)
	}
	if pkg.Error() != "x: invalid file" {
		t.Errorf("sentinel message %q", pkg)
	}
}

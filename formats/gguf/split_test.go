package gguf

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// writeSplit writes n shards of two tensors each under dir, with the split
// keys gguf-split writes (split.no as given by no(k)).
func writeSplit(t *testing.T, dir string, n int, no func(k int) uint16) [][]byte {
	t.Helper()
	var all [][]byte
	for k := 1; k <= n; k++ {
		ts := []formats.Tensor{
			{Name: "t" + string(rune('a'+2*k)), Type: formats.F32, Shape: []int64{2, 3}},
			{Name: "t" + string(rune('b'+2*k)), Type: formats.Q8_0, Shape: []int64{32}},
		}
		meta := formats.Metadata{
			{Key: "general.architecture", Type: formats.TypeString, Value: "shard" + string(rune('0'+k))},
			{Key: SplitNoKey, Type: formats.TypeUint16, Value: no(k)},
			{Key: SplitCountKey, Type: formats.TypeUint16, Value: uint16(n)},
			{Key: SplitTensorsCountKey, Type: formats.TypeInt32, Value: int32(2 * n)},
		}
		data := tensorData(ts)
		b, _ := build(t, ts, meta, nil, data)
		if err := os.WriteFile(filepath.Join(dir, SplitPath("model", k, n)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		all = append(all, data...)
	}
	return all
}

func TestSplit(t *testing.T) {
	dir := t.TempDir()
	data := writeSplit(t, dir, 3, func(k int) uint16 { return uint16(k - 1) })
	m, err := formats.Open(filepath.Join(dir, "model-00002-of-00003.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, ok := m.(*formats.Sharded)
	if !ok {
		t.Fatalf("opened as %T", m)
	}
	if arch, _ := s.Metadata().String("general.architecture"); arch != "shard1" {
		t.Errorf("metadata from %q, want shard1", arch)
	}
	info := s.Info()
	if len(info.Files) != 3 || filepath.Base(info.Files[2]) != "model-00003-of-00003.gguf" || info.Format != "gguf" {
		t.Errorf("info %+v", info)
	}
	if len(s.Tensors()) != 6 {
		t.Fatalf("%d tensors", len(s.Tensors()))
	}
	for i, tt := range s.Tensors() {
		got, err := formats.ReadTensor(s, &tt)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data[i]) {
			t.Errorf("%s (in %s): data differs", tt.Name, tt.File)
		}
	}
}

func TestSplitErrors(t *testing.T) {
	dir := t.TempDir()
	writeSplit(t, dir, 3, func(k int) uint16 { return uint16(k - 1) })
	os.Remove(filepath.Join(dir, "model-00003-of-00003.gguf"))
	_, err := OpenModel(filepath.Join(dir, "model-00001-of-00003.gguf"))
	if err == nil || !strings.Contains(err.Error(), "shard 3 of 3 is missing") || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing shard: %v", err)
	}

	dir = t.TempDir()
	writeSplit(t, dir, 2, func(k int) uint16 { return 0 })
	_, err = OpenModel(filepath.Join(dir, "model-00001-of-00002.gguf"))
	if err == nil || !strings.Contains(err.Error(), "model-00002-of-00002.gguf: split.no is 0 but the name says shard 2") {
		t.Errorf("wrong split.no: %v", err)
	}

	// Named as 4 shards while the files say 2.
	dir = t.TempDir()
	writeSplit(t, dir, 2, func(k int) uint16 { return uint16(k - 1) })
	for k := 1; k <= 4; k++ {
		src := filepath.Join(dir, SplitPath("model", min(k, 2), 2))
		b, _ := os.ReadFile(src)
		os.WriteFile(filepath.Join(dir, SplitPath("other", k, 4)), b, 0o644)
	}
	_, err = OpenModel(filepath.Join(dir, "other-00001-of-00004.gguf"))
	if err == nil || !strings.Contains(err.Error(), "split.count is 2 but the name says 4 shards") {
		t.Errorf("wrong split.count: %v", err)
	}

	if _, err := OpenSplit(filepath.Join(dir, "model-00003-of-00002.gguf")); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("shard 3 of 2: %v", err)
	}
}

func TestParseSplitPath(t *testing.T) {
	p, no, n, ok := ParseSplitPath("flux-q4_K-00002-of-00010.gguf")
	if !ok || p != "flux-q4_K" || no != 2 || n != 10 {
		t.Errorf("got %q %d %d %v", p, no, n, ok)
	}
	for _, s := range []string{"model.gguf", "model-0001-of-0002.gguf", "model-00001-of-00002.safetensors"} {
		if _, _, _, ok := ParseSplitPath(s); ok {
			t.Errorf("%s parsed as a shard", s)
		}
	}
	if SplitPath("m", 1, 3) != "m-00001-of-00003.gguf" {
		t.Error(SplitPath("m", 1, 3))
	}
}

// TestOpenDetect checks the registration with formats.Open.
func TestOpenDetect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.bin")
	if err := os.WriteFile(path, validSmall(t), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, ok := m.(*File); !ok || m.Info().Format != "gguf" || len(m.Tensors()) != 2 {
		t.Errorf("opened as %T %+v", m, m.Info())
	}
}

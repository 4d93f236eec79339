//go:build unix

package safetensors

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
)

// openWithin opens path with OpenModel, failing the test if that takes
// longer than a few seconds (a FIFO blocks its reader).
func openWithin(t *testing.T, path string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		m, err := OpenModel(path)
		if err == nil {
			m.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still opening after 5 s", path)
		return nil
	}
}

// TestShardedIndexEscapes: weight_map entries are base names of regular
// files in the index's folder (issue 14, item 7).
func TestShardedIndexEscapes(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "model")
	out := filepath.Join(root, "outside")
	for _, d := range []string{dir, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret, _ := writeAll(t, []formats.Tensor{{Name: "s", Type: formats.F32, Shape: []int64{2}}}, nil, nil)
	if err := os.WriteFile(filepath.Join(out, "secret.safetensors"), secret, 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.safetensors")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, tc := range []struct{ shard, want string }{
		{"../outside/secret.safetensors", "is not a file name in the index's folder"},
		{"../../../../../../../../dev/zero", "is not a file name in the index's folder"},
		{"/dev/zero", "is not a file name in the index's folder"},
		{"sub\\..\\x.safetensors", "is not a file name in the index's folder"},
		{"..", "is not a file name in the index's folder"},
		{"fifo.safetensors", "not a regular file"},
	} {
		idx := filepath.Join(dir, "model.safetensors.index.json")
		if err := os.WriteFile(idx, []byte(indexJSON([2]string{"s", tc.shard})), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := openWithin(t, idx); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), idx) {
			t.Errorf("shard %q: %v", tc.shard, err)
		}
	}
	// A FIFO named as a model, and one named as a numbered shard.
	if err := openWithin(t, fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO: %v", err)
	}
	if _, err := formats.Open(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("formats.Open of a FIFO: %v", err)
	}
	os.Remove(filepath.Join(dir, "model.safetensors.index.json"))
	one, _ := writeAll(t, []formats.Tensor{{Name: "a", Type: formats.F32, Shape: []int64{2}}}, nil, nil)
	first := filepath.Join(dir, "m-00001-of-00002.safetensors")
	os.WriteFile(first, one, 0o644)
	if err := syscall.Mkfifo(filepath.Join(dir, "m-00002-of-00002.safetensors"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := openWithin(t, first); err == nil || !strings.Contains(err.Error(), "shard 2 of 2 is not a regular file") {
		t.Errorf("numbered FIFO shard: %v", err)
	}
}

// TestTruncatedReadNamedOnce: a file cut short after it was opened gives a
// read error that names the file and the tensor once (issue 14, item 13).
func TestTruncatedReadNamedOnce(t *testing.T) {
	b, _ := writeAll(t, []formats.Tensor{{Name: "s", Type: formats.F32, Shape: []int64{64}}}, nil, nil)
	p := filepath.Join(t.TempDir(), "cut.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := OpenModel(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(p, int64(len(b)-100)); err != nil {
		t.Fatal(err)
	}
	tn := m.Tensors()[0]
	err = formats.ReadFull(m, &tn, make([]byte, tn.Size), 0)
	if err == nil || strings.Count(err.Error(), `tensor "s"`) != 1 || strings.Count(err.Error(), p) != 1 {
		t.Errorf("error %v", err)
	}
}

package quantize

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
	_ "github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/internal/synth"
)

// memModel is a model held in memory: descriptors, optional data (zeros
// when absent) and metadata.
type memModel struct {
	path    string
	tensors []formats.Tensor
	data    map[string][]byte
	meta    formats.Metadata
	format  string
}

func (m *memModel) Path() string { return m.path }
func (m *memModel) Info() formats.Info {
	f := m.format
	if f == "" {
		f = "safetensors"
	}
	return formats.Info{Format: f, Files: []string{m.path}}
}
func (m *memModel) Tensors() []formats.Tensor  { return m.tensors }
func (m *memModel) Metadata() formats.Metadata { return m.meta }
func (m *memModel) Close() error               { return nil }
func (m *memModel) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	d := m.data[t.Name]
	if d == nil {
		clear(p)
		return len(p), nil
	}
	if off >= int64(len(d)) {
		return 0, io.EOF
	}
	return copy(p, d[off:]), nil
}

// synthModel returns the descriptors of a synthetic model as a memModel (all data zero).
func synthModel(t *testing.T, spec synth.Spec) *memModel {
	t.Helper()
	ds, err := synth.Descriptors(spec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ds {
		ds[i].File = "synth-" + spec.Arch + ".safetensors"
	}
	return &memModel{path: "synth-" + spec.Arch + ".safetensors", tensors: ds}
}

// Specs used by the plan tests: widths of 256 so k-quants apply.
var (
	fluxSpec = synth.Spec{Arch: "flux", Scale: 1.0 / 12, Depth: 1, DType: formats.BF16}
	sdxlSpec = synth.Spec{Arch: "sdxl", Scale: 0.25, TextScale: 1.0 / 8, VAEScale: 1.0 / 16, Depth: 1, DType: formats.F16}
	wanSpec  = synth.Spec{Arch: "wan", Scale: 1.0 / 6, Depth: 1, DType: formats.BF16}
)

// plan runs PrepareModel with a dry-run of opts on m.
func plan(t *testing.T, m formats.Model, opts Options) *Result {
	t.Helper()
	if opts.Output == "" {
		opts.Output = "out.gguf"
	}
	opts.DryRun = true
	res, err := PrepareModel(&opts, m)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// rowOf finds the plan row of a tensor.
func rowOf(t *testing.T, r *Result, name string) Row {
	t.Helper()
	for _, row := range r.Rows {
		if row.Name == name {
			return row
		}
	}
	t.Fatalf("no tensor %q in the plan", name)
	return Row{}
}

const tinyPath = "../testdata/tiny-sd1.safetensors"

// logTo returns a logger that writes text records into buf.
func logTo(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// shortNames copies the tensors of the tiny model whose names are under
// 64 bytes (what stock ggml accepts) into a safetensors file in dir.
func shortNames(t *testing.T, dir string) string {
	t.Helper()
	m, err := formats.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var keep []formats.Tensor
	var data [][]byte
	for _, ts := range m.Tensors() {
		if len(ts.Name) >= 64 {
			continue
		}
		b, err := formats.ReadTensor(m, &ts)
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, ts)
		data = append(data, b)
	}
	path := filepath.Join(dir, "short.safetensors")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := safetensors.NewWriter(f, keep, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range data {
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if len(keep) < 100 {
		t.Fatalf("only %d short names", len(keep))
	}
	return path
}

func mustOpen(t *testing.T, path string) formats.Model {
	t.Helper()
	m, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func find(t *testing.T, m formats.Model, name string) formats.Tensor {
	t.Helper()
	ts, ok := formats.Find(m, name)
	if !ok {
		t.Fatalf("%s: no tensor %q", m.Path(), name)
	}
	return ts
}

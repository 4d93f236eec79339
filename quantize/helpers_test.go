package quantize

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	_ "github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
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

// planned is a plan with its report, as the tests look at them.
type planned struct {
	*pipeline.Plan
	*Report
}

// plan runs PlanModel with opts on m.
func plan(t *testing.T, m formats.Model, opts Options) *planned {
	t.Helper()
	if opts.Output == "" {
		opts.Output = "out.gguf"
	}
	p, r, err := PlanModel(&opts, m)
	if err != nil {
		t.Fatal(err)
	}
	return &planned{p, r}
}

// quantizeRun plans opts and, unless dryRun, writes the plan with ro, as
// `sdtool quantize` does.
func quantizeRun(ctx context.Context, opts *Options, ro pipeline.Options, dryRun bool) (*planned, error) {
	p, r, err := Plan(opts)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if !dryRun {
		err = pipeline.Run(ctx, p, ro)
	}
	return &planned{p, r}, err
}

// row is what the tests check about one output tensor.
type row struct {
	Name, Reason      string
	To                formats.DType
	Shape             []int64
	SourceShape       []int64 // the stored source's shape when the output has another
	Reshaped, Imatrix bool
}

// rows lists the plan's outputs as rows.
func (r *planned) rows() []row {
	var out []row
	for _, o := range r.Outputs {
		w := row{Name: o.Name, To: o.Type, Shape: o.Shape, Reason: o.Note}
		w.Reason, w.Imatrix = strings.CutPrefix(o.Note, "imatrix; ")
		if o.Source != nil && !slices.Equal(o.Source.Shape, o.Shape) {
			w.SourceShape, w.Reshaped = o.Source.Shape, true
		}
		out = append(out, w)
	}
	return out
}

// rowOf finds the row of a tensor.
func rowOf(t *testing.T, r *planned, name string) row {
	t.Helper()
	for _, w := range r.rows() {
		if w.Name == name {
			return w
		}
	}
	t.Fatalf("no tensor %q in the plan", name)
	return row{}
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

// layoutFile writes a synthetic layout's header (F16, no data) into dir
// as LAYOUT.safetensors and returns its path, for dry runs.
func layoutFile(t *testing.T, dir, layout string) string {
	t.Helper()
	tensors, err := synth.Descriptors(synth.Spec{Arch: layout, DType: formats.F16})
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, layout+".safetensors")
	writeHeaderOnly(t, in, tensors, nil)
	return in
}

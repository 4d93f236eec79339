package inspect

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
)

// diffModel is an in-memory model of F32 or F16 tensors for Diff tests.
type diffModel struct {
	path    string
	tensors []formats.Tensor
	data    map[string][]byte
	meta    formats.Metadata
}

func (m *diffModel) Path() string { return m.path }
func (m *diffModel) Info() formats.Info {
	return formats.Info{Format: "safetensors", Files: []string{m.path}}
}
func (m *diffModel) Tensors() []formats.Tensor  { return m.tensors }
func (m *diffModel) Metadata() formats.Metadata { return m.meta }
func (m *diffModel) Close() error               { return nil }
func (m *diffModel) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	d := m.data[t.Name]
	if off >= int64(len(d)) {
		return 0, io.EOF
	}
	return copy(p, d[off:]), nil
}

// add appends a tensor of type typ (F32 or F16) holding vals.
func (m *diffModel) add(name string, typ formats.DType, shape []int64, vals ...float32) *diffModel {
	var b []byte
	for _, v := range vals {
		if typ == formats.F16 {
			b = binary.LittleEndian.AppendUint16(b, quant.F32ToF16(v))
		} else {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	if m.data == nil {
		m.data = map[string][]byte{}
	}
	m.data[name] = b
	m.tensors = append(m.tensors, formats.Tensor{Name: name, Type: typ, Shape: shape, File: m.path, Size: int64(len(b))})
	return m
}

func diffOf(t *testing.T, a, b formats.Model, opts DiffOptions) *DiffReport {
	t.Helper()
	r, err := Diff(a, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tensorDiff(t *testing.T, r *DiffReport, name string) TensorDiff {
	t.Helper()
	for _, d := range r.Tensors {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("tensor %q not compared", name)
	return TensorDiff{}
}

func near(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-9 }

// TestDiffMeasures checks the statistics against hand-computed values and
// the name, shape, type and skip reports.
func TestDiffMeasures(t *testing.T) {
	a := (&diffModel{path: "a"}).
		add("half", formats.F32, []int64{4}, 1, 0, 0, 0).
		add("same", formats.F32, []int64{2, 2}, 1, 2, 3, 4).
		add("reshaped", formats.F32, []int64{2, 2}, 1, 2, 3, 4).
		add("zero", formats.F32, []int64{2}, 0, 0).
		add("count", formats.F32, []int64{2}, 1, 2).
		add("typed", formats.F32, []int64{2}, 0.5, -2).
		add("gone", formats.F32, []int64{1}, 1)
	b := (&diffModel{path: "b"}).
		add("half", formats.F32, []int64{4}, 1, 1, 0, 0).
		add("same", formats.F32, []int64{2, 2}, 1, 2, 3, 4).
		add("reshaped", formats.F32, []int64{4}, 1, 2, 3, 4).
		add("zero", formats.F32, []int64{2}, 0, 1).
		add("count", formats.F32, []int64{3}, 1, 2, 3).
		add("typed", formats.F16, []int64{2}, 0.5, -2).
		add("new", formats.F32, []int64{1}, 1)
	r := diffOf(t, a, b, DiffOptions{ChunkElements: 3})
	half := tensorDiff(t, r, "half")
	// ‖a‖ = 1, ‖a−b‖ = 1, a·b = 1, ‖b‖ = √2.
	if !near(half.RelError, 1) || !near(half.Cosine, 1/math.Sqrt2) || !near(half.SNRdB, 0) || half.MaxAbsDiff != 1 || half.Identical {
		t.Errorf("half: rel %v cos %v snr %v max %v", *half.RelError, *half.Cosine, *half.SNRdB, half.MaxAbsDiff)
	}
	same := tensorDiff(t, r, "same")
	if !same.Identical || !near(same.RelError, 0) || same.SNRdB != nil || !near(same.Cosine, 1) {
		t.Errorf("same: %+v", same)
	}
	if rs := tensorDiff(t, r, "reshaped"); !rs.ShapeChanged || !rs.Identical {
		t.Errorf("reshaped: %+v", rs)
	}
	if z := tensorDiff(t, r, "zero"); z.RelError != nil || z.Cosine != nil {
		t.Errorf("zero A: rel %v cos %v, want undefined", z.RelError, z.Cosine)
	}
	if ty := tensorDiff(t, r, "typed"); !ty.TypeChanged || !ty.Identical || ty.TypeA != "f32" || ty.TypeB != "f16" {
		t.Errorf("typed: %+v", ty)
	}
	if r.Tensors[0].Name != "zero" || r.Tensors[1].Name != "half" {
		t.Errorf("not worst first: %s, %s", r.Tensors[0].Name, r.Tensors[1].Name)
	}
	if len(r.Missing) != 1 || r.Missing[0] != "gone" || len(r.Extra) != 1 || r.Extra[0] != "new" {
		t.Errorf("missing %v extra %v", r.Missing, r.Extra)
	}
	if len(r.Skipped) != 1 || r.Skipped[0].Name != "count" || !strings.Contains(r.Skipped[0].Reason, "element counts differ") {
		t.Errorf("skipped %v", r.Skipped)
	}
	tt := r.Totals
	if tt.Compared != 5 || tt.Identical != 3 || tt.ShapeChanges != 1 || tt.TypeChanges != 1 || tt.Worst != "zero" || !r.HasDifferences() {
		t.Errorf("totals %+v", tt)
	}
	// Over all compared elements: ‖a‖² = 1+30+30+0+4.25, ‖a−b‖² = 1+1.
	if want := math.Sqrt(2 / 65.25); !near(tt.RelError, want) {
		t.Errorf("total relative error %v, want %v", *tt.RelError, want)
	}
	var text bytes.Buffer
	if err := WriteDiffText(&text, r); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"only in A (1):", "only in B (1):", "element counts differ", "[2, 2] -> [4]", "identical", "undefined", "worst: zero"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text output lacks %q:\n%s", s, text.String())
		}
	}
}

// TestDiffChunkInvariance checks that the chunk size does not change the
// result (beyond float64 summation order) and that filters apply.
func TestDiffChunkInvariance(t *testing.T) {
	vals := make([]float32, 1000)
	other := make([]float32, 1000)
	for i := range vals {
		vals[i] = float32(math.Sin(float64(i)))
		other[i] = vals[i] + float32(i%7)*1e-3
	}
	a := (&diffModel{path: "a"}).add("w", formats.F32, []int64{10, 100}, vals...).add("x", formats.F32, []int64{1}, 1)
	b := (&diffModel{path: "b"}).add("w", formats.F16, []int64{10, 100}, other...).add("x", formats.F32, []int64{1}, 2)
	r1 := diffOf(t, a, b, DiffOptions{ChunkElements: 7, Threads: 1})
	r2 := diffOf(t, a, b, DiffOptions{Threads: 3})
	w1, w2 := tensorDiff(t, r1, "w"), tensorDiff(t, r2, "w")
	if math.Abs(*w1.RelError-*w2.RelError) > 1e-12 || math.Abs(*w1.SNRdB-*w2.SNRdB) > 1e-9 {
		t.Errorf("chunked %v / %v, whole %v / %v", *w1.RelError, *w1.SNRdB, *w2.RelError, *w2.SNRdB)
	}
	f := diffOf(t, a, b, DiffOptions{Filters: []*regexp.Regexp{regexp.MustCompile(`^x$`)}})
	if len(f.Tensors) != 1 || f.Tensors[0].Name != "x" {
		t.Errorf("filter kept %v", f.Tensors)
	}
}

// TestDiffOrigShapeAndJSON checks that comfy.gguf.orig_shape counts as the
// shape and that the JSON has the documented fields, null where undefined.
func TestDiffOrigShapeAndJSON(t *testing.T) {
	a := (&diffModel{path: "a"}).add("conv", formats.F32, []int64{2, 1, 2, 2}, 1, 2, 3, 4, 5, 6, 7, 8).add("z", formats.F32, []int64{1}, 0)
	b := (&diffModel{path: "b"}).add("conv", formats.F32, []int64{1, 8}, 1, 2, 3, 4, 5, 6, 7, 8).add("z", formats.F32, []int64{1}, 0)
	b.meta = formats.Metadata{{Key: "comfy.gguf.orig_shape.conv", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: []int32{2, 1, 2, 2}}}}
	r := diffOf(t, a, b, DiffOptions{})
	if c := tensorDiff(t, r, "conv"); c.ShapeChanged {
		t.Errorf("orig_shape ignored: %v vs %v", c.ShapeA, c.ShapeB)
	}
	var buf bytes.Buffer
	if err := WriteDiffJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatalf("JSON does not parse: %v", err)
	}
	for _, k := range []string{"a", "b", "filter", "missing", "extra", "tensors", "skipped", "totals"} {
		if _, ok := v[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	z := v["tensors"].([]any)[1].(map[string]any)
	if z["name"] != "z" || z["cosine"] != nil || z["snr_db"] != nil || z["rel_error"] != 0.0 || z["identical"] != true {
		t.Errorf("zero tensor JSON %v", z)
	}
}

// Progress counts the stored bytes of both sides up to their total, and a
// cancelled context stops the comparison with an error that says so.
func TestDiffProgressAndCancel(t *testing.T) {
	vals := make([]float32, 1000)
	a := (&diffModel{path: "a"}).add("w", formats.F32, []int64{10, 100}, vals...).add("v", formats.F16, []int64{10, 100}, vals...)
	b := (&diffModel{path: "b"}).add("w", formats.F16, []int64{10, 100}, vals...).add("v", formats.F16, []int64{10, 100}, vals...)
	var last, total int64
	diffOf(t, a, b, DiffOptions{ChunkElements: 64, Threads: 1, Progress: func(done, tot int64) {
		if done < last {
			t.Errorf("progress went back from %d to %d", last, done)
		}
		last, total = done, tot
	}})
	if want := int64(4000 + 2000 + 2000 + 2000); total != want || last != want {
		t.Errorf("progress ended at %d of %d, want %d of %d", last, total, want, want)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	stopped := errors.New("test stop")
	_, err := Diff(a, b, DiffOptions{ChunkElements: 64, Threads: 1, Context: ctx, Progress: func(int64, int64) { cancel(stopped) }})
	if !errors.Is(err, pipeline.ErrInterrupted) || !strings.Contains(err.Error(), "test stop") {
		t.Errorf("cancelled diff: %v", err)
	}
}

package merge

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/internal/splitmix"
	"github.com/sdtool/sdtool/pipeline"
)

// testTensor is a test tensor with its raw data.
type testTensor struct {
	name  string
	typ   formats.DType
	shape []int64
	data  []byte
}

// f32 stores values as F32 bytes.
func f32(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// floats decodes F32 bytes.
func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// ramp returns n deterministic pseudo-random values in about [-1, 1).
func ramp(n int, seed uint64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(int64(splitmix.Mix(seed*1000003+uint64(i))>>40)-(1<<23)) / (1 << 23)
	}
	return out
}

func tF32(name string, shape []int64, vals []float32) testTensor {
	return testTensor{name: name, typ: formats.F32, shape: shape, data: f32(vals...)}
}

// bytesOf returns n distinct bytes (so that copies are checked for order).
func bytesOf(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// write writes tensors to path as safetensors or GGUF (by extension).
func write(t *testing.T, path string, meta map[string]string, ts ...testTensor) string {
	t.Helper()
	desc := make([]formats.Tensor, len(ts))
	for i, x := range ts {
		desc[i] = formats.Tensor{Name: x.name, Type: x.typ, Shape: x.shape}
	}
	var buf bytes.Buffer
	var tw formats.TensorWriter
	var err error
	if strings.HasSuffix(path, ".gguf") {
		tw, err = gguf.NewWriter(&buf, desc, stringMetadata(meta), nil)
	} else {
		tw, err = safetensors.NewWriter(&buf, desc, meta, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if _, err := tw.Write(x.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readAll opens path and returns every tensor's bytes by name, and the names in order.
func readAll(t *testing.T, path string) (map[string]testTensor, []string, formats.Model) {
	t.Helper()
	m, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	out := map[string]testTensor{}
	var names []string
	for _, x := range m.Tensors() {
		data, err := formats.ReadTensor(m, &x)
		if err != nil {
			t.Fatal(err)
		}
		out[x.Name] = testTensor{name: x.Name, typ: x.Type, shape: x.Shape, data: data}
		names = append(names, x.Name)
	}
	return out, names, m
}

// noOutput checks that neither out nor out.partial exists.
func noOutput(t *testing.T, out string) {
	t.Helper()
	for _, p := range []string{out, out + ".partial"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists after a failed merge", p)
		}
	}
}

// recipeFile writes a recipe into dir and loads it.
func recipeFile(t *testing.T, dir, js string) *Recipe {
	t.Helper()
	path := filepath.Join(dir, "recipe.json")
	if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRecipe(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runPlan runs a plan to completion with the given threads and chunk size.
func runPlan(t *testing.T, p *pipeline.Plan, threads int, chunk int64) {
	t.Helper()
	defer p.Close()
	if err := pipeline.Run(context.Background(), p, pipeline.Options{Threads: threads, ChunkBytes: chunk, MaxMemory: 64 << 20}); err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

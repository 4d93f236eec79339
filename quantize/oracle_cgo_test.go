//go:build cgo

package quantize

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native/ggmltest"
	"github.com/sdtool/sdtool/pipeline"
)

// TestGGMLReaderAccepts quantizes the tiny model's short-named tensors
// (stock ggml refuses names of 64 bytes or more) to Q4_K_M and has ggml's
// own gguf_init_from_file read the result: every tensor with its type and
// ne (full n_dims), and the metadata keys.
func TestGGMLReaderAccepts(t *testing.T) {
	dir := t.TempDir()
	in := shortNames(t, dir)
	out := filepath.Join(dir, "short-q4_k_m.gguf")
	res := run(t, Options{Input: in, Output: out, Type: "Q4_K_M", Targets: []string{"ggml"}, Strict: true}, pipeline.Options{})
	info, err := ggmltest.ReadGGUF(out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Alignment != 32 || len(info.Tensors) != len(res.rows()) {
		t.Fatalf("ggml read alignment %d and %d tensors, want 32 and %d", info.Alignment, len(info.Tensors), len(res.rows()))
	}
	quantized := 0
	for i, gt := range info.Tensors {
		row := res.rows()[i]
		if gt.Name != row.Name || gt.Type != row.To {
			t.Errorf("tensor %d: ggml read %s %s, planned %s %s", i, gt.Name, gt.Type, row.Name, row.To)
		}
		want := [4]int64{1, 1, 1, 1}
		for j, d := range row.Shape {
			want[len(row.Shape)-1-j] = d
		}
		if gt.NE != want {
			t.Errorf("%s: ne %v, want %v", gt.Name, gt.NE, want)
		}
		if gt.Type.Quantized() {
			quantized++
		}
	}
	if quantized == 0 {
		t.Error("no quantized tensor among the short names")
	}
	keys := map[string]any{}
	for _, kv := range info.KVs {
		keys[kv.Key] = kv.Value
	}
	if keys["general.architecture"] != "sd1" || keys["general.file_type"] != uint32(15) || keys["general.quantization_version"] != uint32(2) {
		t.Errorf("ggml read metadata %v", keys)
	}
}

// TestMatchesGGMLQuantizeChunk checks the q4_K tensors against ggml's
// ggml_quantize_chunk on the same floats: without an imatrix with nil
// weights (the reference path), with one with the entry's mean vector, as
// llama-quantize passes it.
func TestMatchesGGMLQuantizeChunk(t *testing.T) {
	dir := t.TempDir()
	dat, gg, means := imatrixFiles(t, dir, fc2)
	src := mustOpen(t, tinyPath)
	for _, c := range []struct {
		name    string
		imatrix []string
	}{{"unweighted", nil}, {"dat", []string{dat}}, {"gguf", []string{gg}}} {
		out := filepath.Join(dir, c.name+".gguf")
		run(t, Options{Input: tinyPath, Output: out, Type: "Q4_K_M", Imatrix: c.imatrix}, pipeline.Options{})
		g := mustOpen(t, out)
		for _, name := range fc2 {
			st := find(t, src, name)
			raw, _ := formats.ReadTensor(src, &st)
			f := make([]float32, st.Elements())
			for i := range f {
				f[i] = f16(raw[2*i:])
			}
			var w []float32
			if c.imatrix != nil {
				w = means[name]
			}
			want, err := ggmltest.QuantizeChunk(formats.Q4_K, f, int(st.RowLength()), w)
			if err != nil {
				t.Fatal(err)
			}
			gt := find(t, g, name)
			got, _ := formats.ReadTensor(g, &gt)
			if !bytes.Equal(got, want) {
				t.Errorf("%s, %s: q4_K bytes differ from ggml_quantize_chunk", c.name, name)
			}
		}
	}
}

package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/tensor"
)

// The pipeline with the real format writers, read back with the real readers.

func encodeF32(dst []byte, src []float32, _ int) error {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return nil
}

// mixedPlan copies some tensors and converts others, returning the bytes each
// output must hold (computed without the pipeline).
func mixedPlan(m *memModel, to formats.DType, enc RowEncoder, encodeAll func([]float32, int) []byte) (*Plan, map[string][]byte) {
	var p Plan
	want := map[string][]byte{}
	for _, t := range m.List {
		src := t
		if t.Type == formats.F16 && len(t.Shape) == 2 {
			p.Outputs = append(p.Outputs, Output{Name: t.Name, Type: to, Shape: t.Shape, Producer: Convert(tensor.Plain(m, t), to, enc), Source: &src})
			f := make([]float32, t.Elements())
			decodeF16(f, m.Data[t.Name])
			want[t.Name] = encodeAll(f, int(t.RowLength()))
			continue
		}
		p.Outputs = append(p.Outputs, Output{Name: t.Name, Type: t.Type, Shape: t.Shape, Producer: Copy(m, t), Source: &src})
		want[t.Name] = m.Data[t.Name]
	}
	return &p, want
}

func checkModel(t *testing.T, path string, m formats.Model, plan *Plan, want map[string][]byte) {
	t.Helper()
	got := m.Tensors()
	if len(got) != len(plan.Outputs) {
		t.Fatalf("%s: %d tensors, want %d", path, len(got), len(plan.Outputs))
	}
	for i, o := range plan.Outputs {
		g := got[i]
		if g.Name != o.Name || g.Type != o.Type {
			t.Errorf("%s: tensor %d is %q %s, want %q %s", path, i, g.Name, g.Type, o.Name, o.Type)
			continue
		}
		data, err := formats.ReadTensor(m, &g)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, want[o.Name]) {
			t.Errorf("%s: tensor %q: data differs", path, o.Name)
		}
	}
}

func ggufModel(t *testing.T) *memModel {
	m := newMemModel("in.mem")
	m.add("blk.0.w", formats.F16, []int64{130, 256}, f16Data(130*256, 21))
	m.add("blk.0.b", formats.F32, []int64{256}, bytes.Repeat([]byte{0, 0, 0x80, 0x3f}, 256))
	m.add("blk.1.w", formats.F16, []int64{7, 64}, f16Data(7*64, 22))
	m.add("blk.1.conv", formats.F16, []int64{4, 2, 3, 3}, f16Data(72, 23))
	m.add("idx", formats.I32, []int64{1, 5}, []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0})
	return m
}

func TestWithGGUFWriter(t *testing.T) {
	m := ggufModel(t)
	newGGUF := func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
		meta := formats.Metadata{{Key: "general.architecture", Type: formats.TypeString, Value: "sd1"}}
		return gguf.NewWriter(w, ts, meta, &gguf.WriterOptions{TrimDims: true})
	}
	dir := t.TempDir()
	var first []byte
	for _, threads := range []int{1, 2, 7} {
		plan, want := mixedPlan(m, toyType, encodeToy, func(f []float32, rl int) []byte {
			b := make([]byte, len(f)/toyBlock*toyBlockBytes)
			encodeToy(b, f, rl)
			return b
		})
		out := filepath.Join(dir, fmt.Sprintf("out%d.gguf", threads))
		if err := Run(context.Background(), at(plan, out, newGGUF), Options{Threads: threads, ChunkBytes: 2048, MaxMemory: 16384}); err != nil {
			t.Fatal(err)
		}
		noPartial(t, out)
		g, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		checkModel(t, out, g, plan, want)
		if s, _ := g.Metadata().String("general.architecture"); s != "sd1" {
			t.Errorf("metadata lost: %q", s)
		}
		g.Close()
		b, _ := os.ReadFile(out)
		if first == nil {
			first = b
		} else if !bytes.Equal(first, b) {
			t.Errorf("threads=%d: GGUF differs from threads=1", threads)
		}
	}
}

func TestWithSafetensorsWriter(t *testing.T) {
	m := newMemModel("in.mem")
	m.add("w", formats.F16, []int64{50, 96}, f16Data(50*96, 31))
	m.add("b", formats.BF16, []int64{96}, f16Data(96, 32))
	m.add("s", formats.F32, nil, []byte{0, 0, 0x80, 0x3f})
	m.add("e", formats.F32, []int64{0}, nil)
	plan, want := mixedPlan(m, formats.F32, encodeF32, func(f []float32, rl int) []byte {
		b := make([]byte, 4*len(f))
		encodeF32(b, f, rl)
		return b
	})
	out := filepath.Join(t.TempDir(), "out.safetensors")
	newST := func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
		return safetensors.NewWriter(w, ts, map[string]string{"format": "pt"}, nil)
	}
	if err := Run(context.Background(), at(plan, out, newST), Options{Threads: 3, ChunkBytes: 1000}); err != nil {
		t.Fatal(err)
	}
	noPartial(t, out)
	s, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// safetensors readers may list tensors in offset order; match by name.
	byName := map[string]formats.Tensor{}
	for _, tt := range s.Tensors() {
		byName[tt.Name] = tt
	}
	for _, o := range plan.Outputs {
		g, ok := byName[o.Name]
		if !ok || g.Type != o.Type {
			t.Errorf("tensor %q: got %+v", o.Name, g)
			continue
		}
		data, err := formats.ReadTensor(s, &g)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, want[o.Name]) {
			t.Errorf("tensor %q: data differs", o.Name)
		}
	}
}

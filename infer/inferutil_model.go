package infer

import (
	"math"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// memModel is a formats.Model held in memory.
type memModel struct {
	tensors []formats.Tensor
	data    map[string][]byte
	meta    formats.Metadata
}

func (m *memModel) Path() string { return "mem.gguf" }

func (m *memModel) Info() formats.Info { return formats.Info{Format: "gguf"} }

func (m *memModel) Tensors() []formats.Tensor { return m.tensors }

func (m *memModel) Metadata() formats.Metadata { return m.meta }

func (m *memModel) Close() error { return nil }

func (m *memModel) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	return copy(p, m.data[t.Name][off:]), nil
}

func (m *memModel) add(name string, typ formats.DType, shape []int64, data []byte) {
	m.tensors = append(m.tensors, formats.Tensor{Name: name, Type: typ, Shape: shape, File: "mem.gguf", Size: int64(len(data))})
	if m.data == nil {
		m.data = map[string][]byte{}
	}
	m.data[name] = data
}

func encode(t *testing.T, typ formats.DType, rowLen int, f []float32) []byte {
	t.Helper()
	enc, err := quant.Encoder(typ)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := typ.RowBytes(int64(rowLen))
	out := make([]byte, int(rb)*len(f)/rowLen)
	for r := 0; r < len(f)/rowLen; r++ {
		enc.Quantize(out[r*int(rb):(r+1)*int(rb)], f[r*rowLen:(r+1)*rowLen], nil)
	}
	return out
}

func decode(t *testing.T, typ formats.DType, b []byte, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if err := quant.DecodeFloats(typ, out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

func ramp(n int, scale float32) []float32 {
	f := make([]float32, n)
	for i := range f {
		f[i] = scale * float32(math.Sin(float64(i)*0.37))
	}
	return f
}

func planByName(t *testing.T, m *memModel, rename func(string) string) map[string]weightSpec {
	t.Helper()
	specs, err := selectWeights(m, rename)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]weightSpec{}
	for _, s := range specs {
		out[s.Name] = s
	}
	return out
}

func keys(m map[string]weightSpec) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// collectTiny generates req on m with a fresh collector.
func collectTiny(t *testing.T, m *Model, req Request, capture string) (*ImatrixStats, *Result) {
	t.Helper()
	s := NewImatrixStats()
	s.captureName = capture
	m.SetImatrix(s)
	defer m.SetImatrix(nil)
	res, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	return s, res
}

func loadTiny(t *testing.T, path string) *Model {
	t.Helper()
	m, err := Load(Components{"model": path}, LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

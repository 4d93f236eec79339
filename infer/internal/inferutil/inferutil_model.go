package inferutil

import (
	"math"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/quant"
)

// MemModel is a formats.Model held in memory.
type MemModel struct {
	TensorList []formats.Tensor
	Data       map[string][]byte
	Meta       formats.Metadata
}

func (m *MemModel) Path() string { return "mem.gguf" }

func (m *MemModel) Info() formats.Info { return formats.Info{Format: "gguf"} }

func (m *MemModel) Tensors() []formats.Tensor { return m.TensorList }

func (m *MemModel) Metadata() formats.Metadata { return m.Meta }

func (m *MemModel) Close() error { return nil }

func (m *MemModel) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	return copy(p, m.Data[t.Name][off:]), nil
}

func (m *MemModel) Add(name string, typ formats.DType, shape []int64, data []byte) {
	m.TensorList = append(m.TensorList, formats.Tensor{Name: name, Type: typ, Shape: shape, File: "mem.gguf", Size: int64(len(data))})
	if m.Data == nil {
		m.Data = map[string][]byte{}
	}
	m.Data[name] = data
}

func Encode(t *testing.T, typ formats.DType, rowLen int, f []float32) []byte {
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

func Decode(t *testing.T, typ formats.DType, b []byte, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if err := quant.DecodeFloats(typ, out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

func Ramp(n int, scale float32) []float32 {
	f := make([]float32, n)
	for i := range f {
		f[i] = scale * float32(math.Sin(float64(i)*0.37))
	}
	return f
}

func PlanByName(t *testing.T, m *MemModel, rename func(string) string) map[string]infer.WeightSpec {
	t.Helper()
	specs, err := infer.SelectWeights(m, rename)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]infer.WeightSpec{}
	for _, s := range specs {
		out[s.Name] = s
	}
	return out
}

func Keys(m map[string]infer.WeightSpec) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// CollectTiny generates req on m with a fresh collector.
func CollectTiny(t *testing.T, m *infer.Model, req infer.Request, capture string) (*infer.ImatrixStats, *infer.Result) {
	t.Helper()
	s := infer.NewImatrixStats()
	s.CaptureName = capture
	m.SetImatrix(s)
	defer m.SetImatrix(nil)
	res, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	return s, res
}

func LoadTiny(t *testing.T, path string) *infer.Model {
	t.Helper()
	m, err := infer.Load(infer.Components{"model": path}, infer.LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

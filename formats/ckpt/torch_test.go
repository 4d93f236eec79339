package ckpt

import (
	"encoding/binary"
	"fmt"
	"go/build"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// torchFixtures is where the module cache keeps files written by real
// torch.save (torch 1.13.1, pickle protocols 1 to 5, legacy and zip): the
// testdata of github.com/nlpodyssey/gopickle, a module go.mod already lists.
// They are read in place, never copied.
func torchFixtures(t *testing.T) string {
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		cache = filepath.Join(build.Default.GOPATH, "pkg", "mod")
	}
	dir := filepath.Join(cache, "github.com", "nlpodyssey", "gopickle@v0.3.0", "pytorch", "testdata")
	if _, err := os.Stat(filepath.Join(dir, "tensor_float32_proto2_zip.pt")); err != nil {
		t.Skipf("torch-written fixtures not in the module cache: %v", err)
	}
	return dir
}

// TestTorchWritten opens every fixture (each holds torch.tensor(VALUES,
// dtype=D) saved as a bare tensor) and decodes the four values.
func TestTorchWritten(t *testing.T) {
	dir := torchFixtures(t)
	floats := []float64{1.2, -3.4, 5.6, -7.8}
	ints := []float64{1, -2, 3, -4}
	cases := []struct {
		name string
		typ  formats.DType
		want []float64
		tol  float64
	}{
		{"float16", formats.F16, floats, 0.005},
		{"float32", formats.F32, floats, 1e-6},
		{"float64", formats.F64, floats, 0},
		{"bfloat16", formats.BF16, floats, 0.04},
		{"int8", formats.I8, ints, 0},
		{"int16", formats.I16, ints, 0},
		{"int32", formats.I32, ints, 0},
		{"int64", formats.I64, ints, 0},
		{"uint8", formats.U8, []float64{1, 10, 100, 255}, 0},
		{"bool", formats.Bool, []float64{1, 0, 1, 0}, 0},
	}
	for _, c := range cases {
		for proto := 1; proto <= 5; proto++ {
			for _, suffix := range []string{"", "_zip"} {
				name := fmt.Sprintf("tensor_%s_proto%d%s.pt", c.name, proto, suffix)
				t.Run(name, func(t *testing.T) {
					p := filepath.Join(dir, name)
					if !Match(p, mustHead(t, p)) {
						t.Fatal("not detected")
					}
					f, err := Open(p)
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					ts := f.Tensors()
					if len(ts) != 1 || ts[0].Name != RootTensorName || ts[0].Type != c.typ || len(ts[0].Shape) != 1 || ts[0].Shape[0] != 4 {
						t.Fatalf("tensors %+v", ts)
					}
					b := mustRead(t, f, ts[0])
					for i, w := range c.want {
						if got := decode(c.typ, b, i); math.Abs(got-w) > c.tol {
							t.Errorf("value %d = %v, want %v", i, got, w)
						}
					}
				})
			}
		}
	}
}

// decode reads element i of a little-endian buffer of type typ.
func decode(typ formats.DType, b []byte, i int) float64 {
	switch typ {
	case formats.F16:
		return halfToFloat(binary.LittleEndian.Uint16(b[2*i:]))
	case formats.BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	case formats.F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case formats.F64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	case formats.I8:
		return float64(int8(b[i]))
	case formats.U8, formats.Bool:
		return float64(b[i])
	case formats.I16:
		return float64(int16(binary.LittleEndian.Uint16(b[2*i:])))
	case formats.I32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case formats.I64:
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	}
	return math.NaN()
}

// halfToFloat decodes normal and zero IEEE half values (enough for the fixtures).
func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	if e == 0 {
		return sign * m / 1024 * math.Pow(2, -14)
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

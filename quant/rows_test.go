package quant

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// goQuantizers lists the registered types with a pure-Go quantizer.
func goQuantizers() []formats.DType {
	var out []formats.DType
	for _, t := range Registered() {
		if c, _ := Lookup(t); c.Quantize != nil && !c.Native {
			out = append(out, t)
		}
	}
	return out
}

func TestQuantizeRowsWorkerCountInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 1))
	for _, typ := range goQuantizers() {
		c, _ := Lookup(typ)
		n := roundUp(512, typ.Info().BlockSize)
		const rows = 13
		src := make([]float32, n*rows)
		gaussRow(r, src)
		rb, _ := typ.RowBytes(int64(n))
		for _, ws := range testWeights(harnessSeed, n) {
			if ws.vec == nil && c.NeedsWeights {
				continue
			}
			want := make([]byte, int(rb)*rows)
			if err := QuantizeRows(typ, want, src, n, ws.vec, 1); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			// Each row alone must give the same bytes as in the batch.
			for row := range rows {
				one := make([]byte, rb)
				if err := QuantizeRows(typ, one, src[row*n:(row+1)*n], n, ws.vec, 1); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(one, want[row*int(rb):(row+1)*int(rb)]) {
					t.Fatalf("%s/%s: row %d alone differs from the batch", typ, ws.name, row)
				}
			}
			for _, workers := range []int{2, 3, 8, 64, 0} {
				got := make([]byte, len(want))
				if err := QuantizeRows(typ, got, src, n, ws.vec, workers); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s/%s: %d workers give different bytes", typ, ws.name, workers)
				}
			}
			if !CanDequantize(typ) {
				continue
			}
			back1 := make([]float32, len(src))
			if err := DequantizeRows(typ, back1, want, 1); err != nil {
				t.Fatal(err)
			}
			for _, workers := range []int{2, 5, 0} {
				back := make([]float32, len(src))
				if err := DequantizeRows(typ, back, want, workers); err != nil {
					t.Fatal(err)
				}
				if i := firstDiffBitsNaN(back, back1); i >= 0 {
					t.Fatalf("%s: dequantize with %d workers differs at %d", typ, workers, i)
				}
			}
		}
	}
}

// firstDiffBitsNaN is the first index where the float bits differ, or -1.
func firstDiffBitsNaN(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func TestQuantizeRowsErrors(t *testing.T) {
	src := make([]float32, 64)
	ok := make([]byte, 2*18)
	cases := []struct {
		name    string
		typ     formats.DType
		dst     []byte
		src     []float32
		nPerRow int
		weights []float32
		want    string
	}{
		{"zero row", formats.Q4_0, ok, src, 0, nil, "not positive"},
		{"partial row", formats.Q4_0, ok, src[:48], 32, nil, "whole number of rows"},
		{"not a block multiple", formats.Q4_0, ok, src, 16, nil, "block size"},
		{"short dst", formats.Q4_0, ok[:35], src, 32, nil, "need 36"},
		{"long dst", formats.Q4_0, make([]byte, 37), src, 32, nil, "need 36"},
		{"weights length", formats.Q4_0, ok, src, 32, make([]float32, 64), "64 importance weights"},
		{"no codec", formats.C64, ok, src, 32, nil, "cannot quantize"},
		{"decode only", formats.Q8_K, make([]byte, 292), make([]float32, 256), 256, nil, "no codec"},
	}
	for _, c := range cases {
		err := QuantizeRows(c.typ, c.dst, c.src, c.nPerRow, c.weights, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if err := QuantizeRows(formats.C64, nil, nil, 1, nil, 1); !errors.Is(err, ErrNoCodec) {
		t.Errorf("C64: %v does not wrap ErrNoCodec", err)
	}
	if err := DequantizeRows(formats.Q4_0, make([]float32, 32), make([]byte, 17), 1); err == nil {
		t.Error("17 bytes for a q4_0 block accepted")
	}
	if err := DequantizeRows(formats.Q4_0, make([]float32, 33), make([]byte, 18), 1); err == nil {
		t.Error("33 elements of q4_0 accepted")
	}
	// Empty input is fine.
	if err := QuantizeRows(formats.Q4_0, nil, nil, 32, nil, 4); err != nil {
		t.Errorf("empty: %v", err)
	}
}

// TestQuantizeRowsRecoversPanics registers a codec that panics and checks
// that QuantizeRows returns an error instead of crashing.
func TestQuantizeRowsRecoversPanics(t *testing.T) {
	old, had := Lookup(formats.U16)
	defer func() {
		if had {
			Register(old)
		}
	}()
	Register(Codec{Type: formats.U16, Quantize: func([]byte, []float32, []float32) { panic("boom") },
		Dequantize: func([]float32, []byte) { panic("boom") }})
	for _, workers := range []int{1, 3} {
		if err := QuantizeRows(formats.U16, make([]byte, 24), make([]float32, 12), 4, nil, workers); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Errorf("%d workers: got %v", workers, err)
		}
	}
	if err := DequantizeRows(formats.U16, make([]float32, 4), make([]byte, 8), 1); err == nil {
		t.Error("dequantize panic not reported")
	}
}

func TestQuantizeRowsNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 2))
	for _, typ := range goQuantizers() {
		c, _ := Lookup(typ)
		n := roundUp(1024, typ.Info().BlockSize)
		src := make([]float32, 4*n)
		gaussRow(r, src)
		rb, _ := typ.RowBytes(int64(n))
		dst := make([]byte, 4*int(rb))
		w := testWeights(harnessSeed, n)[2].vec
		for _, weights := range [][]float32{nil, w} {
			if weights == nil && c.NeedsWeights {
				continue
			}
			allocs := testing.AllocsPerRun(5, func() {
				if err := QuantizeRows(typ, dst, src, n, weights, 1); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s (weights %v): %v allocations per call", typ, weights != nil, allocs)
			}
		}
		if CanDequantize(typ) {
			back := make([]float32, len(src))
			allocs := testing.AllocsPerRun(5, func() {
				if err := DequantizeRows(typ, back, dst, 1); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s: %v allocations per dequantize", typ, allocs)
			}
		}
	}
}

// TestQuantizeSpecialsNeverPanic runs every Go quantizer and dequantizer on
// rows with NaN and ±Inf and requires them to finish without error.
func TestQuantizeSpecialsNeverPanic(t *testing.T) {
	for _, typ := range goQuantizers() {
		c, _ := Lookup(typ)
		for _, rs := range testSpecialRowSets(harnessSeed, typ.Info().BlockSize) {
			rb, _ := typ.RowBytes(int64(rs.nPerRow))
			dst := make([]byte, int(rb)*rs.rows())
			for _, ws := range testWeights(harnessSeed, rs.nPerRow) {
				if ws.vec == nil && c.NeedsWeights {
					continue
				}
				if err := QuantizeRows(typ, dst, rs.data, rs.nPerRow, ws.vec, 2); err != nil {
					t.Errorf("%s/%s: %v", typ, ws.name, err)
				}
				if CanDequantize(typ) {
					if err := DequantizeRows(typ, make([]float32, len(rs.data)), dst, 2); err != nil {
						t.Errorf("%s/%s: %v", typ, ws.name, err)
					}
				}
			}
		}
	}
}

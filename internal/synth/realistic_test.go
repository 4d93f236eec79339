package synth

import (
	"encoding/binary"
	"io"
	"math"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// TestInitWeightRealistic checks the three statistics against plain
// InitWeight on the same shape: about one column in 64 is 20 times larger
// and row norms spread by a log-normal factor.
func TestInitWeightRealistic(t *testing.T) {
	const rows, cols = 256, 512
	read := func(init Init) []float32 {
		ts := TensorSpec{Name: "w", Shape: []int64{rows, cols}, Type: formats.F32, Init: init}
		raw, err := io.ReadAll(Data(Spec{Seed: 7}, ts))
		if err != nil {
			t.Fatal(err)
		}
		f := make([]float32, rows*cols)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return f
	}
	plain, real := read(InitWeight), read(InitWeightRealistic)
	colRMS := func(f []float32, c int) float64 {
		var s float64
		for r := 0; r < rows; r++ {
			s += float64(f[r*cols+c]) * float64(f[r*cols+c])
		}
		return math.Sqrt(s / rows)
	}
	var median []float64
	for c := 0; c < cols; c++ {
		median = append(median, colRMS(real, c))
	}
	outliers := 0
	ref := colRMS(plain, 0)
	for _, v := range median {
		if v > 8*ref {
			outliers++
		}
	}
	if outliers < 2 || outliers > 24 {
		t.Errorf("%d outlier columns of %d, want about %d", outliers, cols, cols/64)
	}
	rowNorm := func(f []float32, r int) float64 {
		var s float64
		for c := 0; c < cols; c++ {
			v := float64(f[r*cols+c])
			s += v * v
		}
		return math.Sqrt(s)
	}
	lo, hi := math.Inf(1), 0.0
	plo, phi := math.Inf(1), 0.0
	for r := 0; r < rows; r++ {
		n, p := rowNorm(real, r), rowNorm(plain, r)
		lo, hi, plo, phi = min(lo, n), max(hi, n), min(plo, p), max(phi, p)
	}
	if hi/lo < 2*phi/plo {
		t.Errorf("row norms spread %.2fx, plain %.2fx: no per-row spread", hi/lo, phi/plo)
	}
}

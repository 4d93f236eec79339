package lora

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// TestExtractFactorRange: kohya's split (up = U·Σ) of a difference of
// ±65000 puts values past f16's range into lora_up; the factors must then
// split Σ evenly (same product, all finite), an ordinary layer must keep
// kohya's split, and a difference too large for f16 even split must be
// refused rather than written as Inf.
func TestExtractFactorRange(t *testing.T) {
	const rows, cols, rank = 64, 48, 4
	l := &ExtractLayer{Module: "lora_unet_test", Rows: rows, Inner: []int64{cols}}
	for _, c := range []struct {
		name     string
		scale    float64
		balanced bool   // the factors must not be kohya's split
		refused  string // part of the error for f16, "" when written
	}{
		{"ordinary", 0.01, false, ""},
		{"±65000", 65000, true, ""},
		{"±1e12", 1e12, true, "exceed f16's range"},
	} {
		r := rand.New(rand.NewPCG(7, 7))
		d := make([]float32, rows*cols)
		for i := range d {
			d[i] = float32(c.scale * (2*float64(r.IntN(2)) - 1))
		}
		dec, err := Decompose(d, rows, cols, l.Module, ExtractOptions{Rank: rank, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		want := product(factors(t, l, dec, formats.F32))
		ts, err := l.Tensors(dec, formats.F16)
		if c.refused != "" {
			if err == nil || !strings.Contains(err.Error(), c.refused) {
				t.Errorf("%s: f16: %v, want an error saying %q", c.name, err, c.refused)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		up, down := decodeF16(t, ts[0].Data), decodeF16(t, ts[1].Data)
		for _, v := range append(append([]float32{}, up...), down...) {
			if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
				t.Fatalf("%s: f16 factors hold %v", c.name, v)
			}
		}
		got := product(up, down)
		var num, den float64
		for i := range want {
			num += (float64(got[i]) - float64(want[i])) * (float64(got[i]) - float64(want[i]))
			den += float64(want[i]) * float64(want[i])
		}
		if e := math.Sqrt(num / den); e > 2e-3 {
			t.Errorf("%s: f16 factors' product is off by %.3g of the f32 one", c.name, e)
		}
		kohya := math.Abs(float64(up[0])-float64(dec.Up[0])) <= 1e-3*math.Abs(float64(dec.Up[0]))
		if kohya == c.balanced {
			t.Errorf("%s: lora_up[0] = %v, kohya's split has %v; want the split balanced: %v", c.name, up[0], dec.Up[0], c.balanced)
		}
	}
}

// factors encodes dec in t and returns lora_up and lora_down as floats.
func factors(t *testing.T, l *ExtractLayer, dec *Decomposition, typ formats.DType) ([]float32, []float32) {
	t.Helper()
	ts, err := l.Tensors(dec, typ)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, 2)
	for i := range out {
		out[i] = make([]float32, len(ts[i].Data)/4)
		if err := quant.DecodeFloats(typ, out[i], ts[i].Data); err != nil {
			t.Fatal(err)
		}
	}
	return out[0], out[1]
}

func decodeF16(t *testing.T, b []byte) []float32 {
	t.Helper()
	v := make([]float32, len(b)/2)
	if err := quant.DecodeFloats(formats.F16, v, b); err != nil {
		t.Fatal(err)
	}
	return v
}

// product is up·down for up [rows, r] and down [r, cols] with r = 4.
func product(up, down []float32) []float64 {
	const r = 4
	rows, cols := len(up)/r, len(down)/r
	out := make([]float64, rows*cols)
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			for c := 0; c < r; c++ {
				out[i*cols+j] += float64(up[i*r+c]) * float64(down[c*cols+j])
			}
		}
	}
	return out
}

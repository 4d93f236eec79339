//go:build cgo

package codecs

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/native/ggmltest"
	"github.com/sdtool/sdtool/quant"
)

func TestMain(m *testing.M) {
	// Should a guard fail, ggml aborts; skip its gdb backtrace, which takes
	// minutes on a loaded machine.
	os.Setenv("GGML_NO_BACKTRACE", "1")
	os.Exit(m.Run())
}

// skipShort skips tests that quantize grid types: ggml builds its search
// tables for each type on first use, tens of CPU seconds in all.
// testGridTypes are the grid types the tests quantize: every one in the long
// run (SDTOOL_LONG=1), else the two with 256-point grids (iq2_xxs, iq3_xxs),
// whose ggml search tables build fastest: the others' take tens of CPU
// seconds in the plain build `go test` makes.
func testGridTypes() []formats.DType {
	if longtest.Enabled() {
		return GridIQTypes
	}
	return []formats.DType{formats.IQ2_XXS, formats.IQ3_XXS}
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("needs ggml's grid search tables")
	}
}

// gaussRows returns rows of n N(0, 1) values times scale, with an outlier
// about one element in 64.
func gaussRows(seed uint64, n, rows int, scale float32) []float32 {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	x := make([]float32, n*rows)
	for i := range x {
		v := r.NormFloat64()
		if r.IntN(64) == 0 {
			v *= 8
		}
		x[i] = float32(v) * scale
	}
	return x
}

func TestRegistered(t *testing.T) {
	for _, typ := range GridIQTypes {
		c, err := quant.Encoder(typ)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if !c.Native || !c.UsesWeights || c.NeedsWeights != native.RequiresImatrix(typ) {
			t.Errorf("%s: Native %v UsesWeights %v NeedsWeights %v", typ, c.Native, c.UsesWeights, c.NeedsWeights)
		}
		if _, err := quant.Decoder(typ); err != nil {
			t.Errorf("%s: registering the quantizer lost the Go dequantizer: %v", typ, err)
		}
	}
}

// roundTripError returns sqrt(sum (y-x)^2 / sum x^2) after quantizing x as
// typ with weights w and decoding it again.
func roundTripError(t *testing.T, typ formats.DType, x []float32, n int, w []float32) float64 {
	t.Helper()
	rb, _ := typ.RowBytes(int64(n))
	q := make([]byte, len(x)/n*int(rb))
	if err := quant.QuantizeRows(typ, q, x, n, w, 2); err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
	y := make([]float32, len(x))
	if err := quant.DequantizeRows(typ, y, q, 2); err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
	var num, den float64
	for i := range x {
		d := float64(y[i] - x[i])
		num += d * d
		den += float64(x[i]) * float64(x[i])
	}
	return math.Sqrt(num / den)
}

func TestRoundTrip(t *testing.T) {
	skipShort(t)
	const n = 1024
	x := gaussRows(1, n, 4, 0.02)
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	// Upper bounds: about 15% above what the linked ggml gives on these
	// rows (iq2_xxs 0.516, iq2_xs 0.414, iq2_s 0.381, iq3_xxs 0.236,
	// iq3_s 0.182, iq1_s 0.623, iq1_m 0.509 with ones).
	bound := map[formats.DType]float64{
		formats.IQ2_XXS: 0.60, formats.IQ2_XS: 0.48, formats.IQ2_S: 0.44, formats.IQ3_XXS: 0.28,
		formats.IQ3_S: 0.21, formats.IQ1_S: 0.72, formats.IQ1_M: 0.59,
	}
	got := map[formats.DType]float64{}
	for _, typ := range testGridTypes() {
		for _, w := range [][]float32{ones, nil} {
			if w == nil && native.RequiresImatrix(typ) {
				continue
			}
			e := roundTripError(t, typ, x, n, w)
			t.Logf("%s weights=%v: relative RMSE %.4f", typ, w != nil, e)
			if w != nil {
				got[typ] = e
			}
			if limit := bound[typ] * 1.2; e > limit || e != e {
				t.Errorf("%s weights=%v: relative RMSE %.4f above %.3f", typ, w != nil, e, limit)
			}
		}
		if got[typ] > bound[typ] {
			t.Errorf("%s: relative RMSE %.4f above %.3f", typ, got[typ], bound[typ])
		}
	}
	if len(got) < len(GridIQTypes) {
		return // the orders below need every type: the long run (SDTOOL_LONG=1)
	}
	// More bits per element must mean less error.
	order := []formats.DType{formats.IQ3_S, formats.IQ3_XXS, formats.IQ2_S, formats.IQ2_XS, formats.IQ2_XXS}
	for i := 1; i < len(order); i++ {
		if got[order[i-1]] >= got[order[i]] {
			t.Errorf("%s error %.4f not below %s's %.4f", order[i-1], got[order[i-1]], order[i], got[order[i]])
		}
	}
	if got[formats.IQ1_M] >= got[formats.IQ1_S] {
		t.Errorf("iq1_m error %.4f not below iq1_s's %.4f", got[formats.IQ1_M], got[formats.IQ1_S])
	}
}

// TestTransparent checks that ordinary input reaches ggml untouched: the
// codec's bytes equal one ggml_quantize_chunk call over the whole rows, for
// importance values spanning four decades and for none (with ones standing
// in where ggml needs a vector).
func TestTransparent(t *testing.T) {
	skipShort(t)
	const n = 512
	x := gaussRows(2, n, 3, 1)
	r := rand.New(rand.NewPCG(3, 4))
	w := make([]float32, n)
	ones := make([]float32, n)
	for i := range w {
		w[i] = float32(math.Pow(10, 4*r.Float64()-2))
		ones[i] = 1
	}
	for _, typ := range testGridTypes() {
		for _, vec := range [][]float32{w, nil} {
			ref := vec
			if vec == nil && native.RequiresImatrix(typ) {
				ref = ones
			}
			want, err := ggmltest.QuantizeChunk(typ, x, n, ref)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(want))
			if vec == nil && native.RequiresImatrix(typ) {
				// QuantizeRows refuses this; the codec itself falls back to ones.
				c, _ := quant.Lookup(typ)
				rb := len(want) / (len(x) / n)
				for r := range len(x) / n {
					c.Quantize(got[r*rb:(r+1)*rb], x[r*n:(r+1)*n], nil)
				}
			} else if err := quant.QuantizeRows(typ, got, x, n, vec, 1); err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("%s weights=%v: bytes differ from ggml_quantize_chunk", typ, vec != nil)
			}
		}
	}
}

// TestExtremeInputs feeds every grid type the inputs on which ggml's
// searches abort the process when called directly (found by probing the
// linked ggml): the test fails by crashing if a guard is missing. The
// decoded values must be finite wherever the input magnitude is
// representable.
func TestExtremeInputs(t *testing.T) {
	skipShort(t)
	base := gaussRows(5, 256, 1, 1)
	type tc struct {
		name   string
		x, w   func(i int) float32
		finite bool
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	one := func(int) float32 { return 1 }
	xb := func(s float32) func(int) float32 { return func(i int) float32 { return base[i] * s } }
	cases := []tc{
		{"nan", func(i int) float32 { return map[bool]float32{true: nan, false: base[i]}[i == 5] }, one, true},
		{"inf", func(i int) float32 { return map[bool]float32{true: -inf, false: base[i]}[i == 7] }, one, false},
		{"1e19", xb(1e19), one, false},
		{"1e30", xb(1e30), one, false},
		{"maxfloat", func(i int) float32 { return math.MaxFloat32 * float32(1-2*(i%2)) }, one, false},
		{"1e-9", xb(1e-9), one, true},
		{"1e-10", xb(1e-10), one, true},
		{"1e-12", xb(1e-12), one, true},
		{"1e-14", xb(1e-14), one, true},
		{"1e-40", xb(1e-40), one, true},
		{"tiny-group", func(i int) float32 {
			if i < 32 {
				return base[i] * 1e-12
			}
			return base[i]
		}, one, true},
		{"w-zero", xb(1), func(int) float32 { return 0 }, true},
		{"w-zero-group", xb(1), func(i int) float32 { return float32(min(1, i/32)) }, true},
		{"w-zero-octet", xb(1), func(i int) float32 { return float32(min(1, i/8)) }, true},
		{"w-nan", xb(1), func(i int) float32 { return map[bool]float32{true: nan, false: 1}[i == 3] }, true},
		{"w-inf", xb(1), func(i int) float32 { return map[bool]float32{true: inf, false: 1}[i == 3] }, true},
		{"w-neg", xb(1), func(int) float32 { return -1 }, true},
		{"w-1e-30", xb(1), func(int) float32 { return 1e-30 }, true},
		{"w-1e-10", xb(1), func(int) float32 { return 1e-10 }, true},
		{"w-1e30", xb(1), func(int) float32 { return 1e30 }, true},
		{"w-1e30-x-1e3", xb(1e3), func(int) float32 { return 1e30 }, true},
		{"w-1e30-x-1e7", xb(1e7), func(int) float32 { return 1e30 }, false},
		{"w-mixed-decades", xb(1), func(i int) float32 { return float32(math.Pow(10, float64(i%64-32))) }, true},
		{"w-2^-16-x-2^-30", xb(1.0 / (1 << 30)), func(int) float32 { return 1.0 / (1 << 16) }, true},
		// Issue 14, item 3: subnormal importance values, a whole block or
		// one group, zeros and huge values mixed in.
		{"w-1e-45", xb(1), func(int) float32 { return 1e-45 }, true},
		{"w-1e-40", xb(1), func(int) float32 { return 1e-40 }, true},
		{"w-1e-40-group", xb(1), func(i int) float32 { return map[bool]float32{true: 1e-40, false: 1}[i >= 32 && i < 64] }, true},
		{"w-subnormal-mixed", xb(1), func(i int) float32 { return []float32{1e-45, 0, 1e-40, 1}[i%4] }, true},
		{"w-subnormal-zero", xb(1), func(i int) float32 { return map[bool]float32{true: 1e-45, false: 0}[i%7 == 0] }, true},
		{"w-maxfloat", xb(1), func(int) float32 { return math.MaxFloat32 }, true},
		{"w-groups-mixed", xb(1), func(i int) float32 {
			return []float32{1e-45, 3e-44, 3e38, 1, 1e-40, 1e30, math.SmallestNonzeroFloat32, 1e-20}[i/32] * (1 - 0.25*float32(i%3))
		}, true},
		{"w-1e-45-x-1e-40", xb(1e-40), func(int) float32 { return 1e-45 }, true},
	}
	for _, typ := range testGridTypes() {
		rb := typ.Info().BlockBytes
		for _, c := range cases {
			x := make([]float32, 256)
			w := make([]float32, 256)
			for i := range x {
				x[i], w[i] = c.x(i), c.w(i)
			}
			for _, vec := range [][]float32{w, nil} {
				q := make([]byte, rb)
				if err := quant.QuantizeRows(typ, q, x, 256, vec, 1); err != nil {
					if vec == nil && native.RequiresImatrix(typ) {
						continue
					}
					t.Fatalf("%s %s: %v", typ, c.name, err)
				}
				y := make([]float32, 256)
				if err := quant.DequantizeRows(typ, y, q, 1); err != nil {
					t.Fatal(err)
				}
				if !c.finite {
					continue
				}
				for i, v := range y {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Errorf("%s %s weights=%v: element %d decodes to %g", typ, c.name, vec != nil, i, v)
						break
					}
				}
			}
		}
	}
}

// TestPreconditions checks that rows ggml would assert on never reach it.
func TestPreconditions(t *testing.T) {
	c, err := quant.Encoder(formats.IQ3_S)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name    string
		dst     []byte
		src, w  []float32
		message string
	}{
		{"short row", make([]byte, 110), make([]float32, 128), nil, "multiple of 256"},
		{"empty row", nil, nil, nil, "multiple of 256"},
		{"dst size", make([]byte, 100), make([]float32, 256), nil, "want 110"},
		{"weights size", make([]byte, 110), make([]float32, 256), make([]float32, 255), "importance values"},
	} {
		func() {
			defer func() {
				r := recover()
				if r == nil {
					t.Errorf("%s: accepted", bad.name)
				} else if !strings.Contains(fmt.Sprint(r), bad.message) {
					t.Errorf("%s: %v, want a message with %q", bad.name, r, bad.message)
				}
			}()
			c.Quantize(bad.dst, bad.src, bad.w)
		}()
	}
	// Through the row API the same mistakes are plain errors.
	if err := quant.QuantizeRows(formats.IQ3_S, make([]byte, 110), make([]float32, 128), 128, nil, 1); err == nil {
		t.Error("QuantizeRows accepted a 128-element iq3_s row")
	}
}

// TestNoAllocation checks that quantizing a row allocates nothing once the
// codec is warm (iq3_xxs: its tables are the quickest to build).
func TestNoAllocation(t *testing.T) {
	skipShort(t)
	c, err := quant.Encoder(formats.IQ3_XXS)
	if err != nil {
		t.Fatal(err)
	}
	x := gaussRows(6, 1024, 1, 1)
	w := make([]float32, len(x))
	for i := range w {
		w[i] = 1 + float32(i%7)
	}
	x[10] = float32(math.NaN()) // take the sanitizing path too
	dst := make([]byte, 4*98)
	c.Quantize(dst, x, w)
	if n := testing.AllocsPerRun(20, func() { c.Quantize(dst, x, w) }); n != 0 {
		t.Errorf("%v allocations per row", n)
	}
}

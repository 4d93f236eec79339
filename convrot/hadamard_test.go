package convrot

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats/comfyquant"
)

var allGroupSizes = []int{4, 16, 64, 256, 1024, 4096}

// TestDenseHadamardDefinition checks the Kronecker construction itself,
// independently of the fast transform: entries ±1/sqrt(G), symmetric, and
// (for sizes where the G^3 product is cheap) H·H = I.
func TestDenseHadamardDefinition(t *testing.T) {
	for _, g := range allGroupSizes {
		h, err := DenseHadamard(g)
		if err != nil {
			t.Fatal(err)
		}
		want := 1 / math.Sqrt(float64(g))
		for i := 0; i < g; i++ {
			for j := 0; j < g; j++ {
				if v := h[i*g+j]; math.Abs(math.Abs(v)-want) > 1e-15 {
					t.Fatalf("G=%d: H[%d,%d] = %v, want ±%v", g, i, j, v, want)
				}
				if h[i*g+j] != h[j*g+i] {
					t.Fatalf("G=%d: H[%d,%d] != H[%d,%d]: not symmetric", g, i, j, j, i)
				}
			}
		}
		if g > 256 {
			continue
		}
		for i := 0; i < g; i++ {
			for j := 0; j < g; j++ {
				var s float64
				for k := 0; k < g; k++ {
					s += h[i*g+k] * h[k*g+j]
				}
				id := 0.0
				if i == j {
					id = 1
				}
				if math.Abs(s-id) > 1e-12 {
					t.Fatalf("G=%d: (H·H)[%d,%d] = %v, want %v", g, i, j, s, id)
				}
			}
		}
	}
	// The 4x4 base case is the matrix of the format, written out.
	h, _ := DenseHadamard(4)
	base := []float64{1, 1, 1, -1, 1, 1, -1, 1, 1, -1, 1, 1, -1, 1, 1, 1}
	for i, v := range base {
		if h[i] != v/2 {
			t.Fatalf("H4[%d] = %v, want %v", i, h[i], v/2)
		}
	}
	if _, err := DenseHadamard(512); err == nil {
		t.Error("DenseHadamard(512) succeeded")
	}
}

// TestRotateBasisExact runs the fast transform on every basis vector: the
// result must equal the dense matrix's row exactly (the values are dyadic,
// so float32 holds them exactly), and a second pass must give the basis
// vector back exactly, which proves H·H = I for every G up to 4096.
func TestRotateBasisExact(t *testing.T) {
	for _, g := range allGroupSizes {
		h, _ := DenseHadamard(g)
		x := make([]float32, g)
		for i := 0; i < g; i++ {
			clear(x)
			x[i] = 1
			if err := Rotate(x, g); err != nil {
				t.Fatal(err)
			}
			for j, v := range x {
				if float64(v) != h[i*g+j] {
					t.Fatalf("G=%d: fast(e_%d)[%d] = %v, dense %v", g, i, j, v, h[i*g+j])
				}
			}
			if err := Rotate(x, g); err != nil {
				t.Fatal(err)
			}
			for j, v := range x {
				want := float32(0)
				if j == i {
					want = 1
				}
				if v != want {
					t.Fatalf("G=%d: fast(fast(e_%d))[%d] = %v, want %v", g, i, j, v, want)
				}
			}
		}
	}
}

// TestRotateMatchesDense compares the fast transform on random rows of
// several groups with the dense product computed in float64.
func TestRotateMatchesDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range allGroupSizes {
		h, _ := DenseHadamard(g)
		const groups = 3
		x := make([]float32, groups*g)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		y := append([]float32(nil), x...)
		if err := Rotate(y, g); err != nil {
			t.Fatal(err)
		}
		for grp := 0; grp < groups; grp++ {
			in := x[grp*g : (grp+1)*g]
			var norm float64
			for _, v := range in {
				norm += float64(v) * float64(v)
			}
			norm = math.Sqrt(norm)
			for j := 0; j < g; j++ {
				var want float64
				for k := 0; k < g; k++ {
					want += float64(in[k]) * h[k*g+j]
				}
				// log4(G) float32 stages, each within a few ulp of the row norm.
				if d := math.Abs(float64(y[grp*g+j]) - want); d > 1e-6*norm {
					t.Fatalf("G=%d group %d col %d: fast %v, dense %v (diff %g, norm %g)", g, grp, j, y[grp*g+j], want, d, norm)
				}
			}
		}
	}
}

// TestRotatePreservesNorm is the orthogonality property on random rows:
// the norm of every group is kept, and rotating twice gives the row back.
func TestRotatePreservesNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, g := range allGroupSizes {
		for trial := 0; trial < 20; trial++ {
			x := make([]float32, g)
			scale := math.Pow(10, float64(rng.IntN(12)-6))
			for i := range x {
				x[i] = float32(rng.NormFloat64() * scale)
			}
			y := append([]float32(nil), x...)
			if err := Rotate(y, g); err != nil {
				t.Fatal(err)
			}
			n0, n1 := norm2(x), norm2(y)
			if math.Abs(n0-n1) > 1e-6*n0 {
				t.Fatalf("G=%d: norm %g became %g", g, n0, n1)
			}
			if err := Rotate(y, g); err != nil {
				t.Fatal(err)
			}
			var d float64
			for i := range x {
				d = math.Max(d, math.Abs(float64(x[i]-y[i])))
			}
			if d > 1e-6*n0 {
				t.Fatalf("G=%d: H·H·x differs from x by %g (norm %g)", g, d, n0)
			}
		}
	}
}

func TestRotateErrors(t *testing.T) {
	if err := Rotate(make([]float32, 512), 512); !errors.Is(err, comfyquant.ErrGroupSize) {
		t.Errorf("Rotate(G=512) = %v, want comfyquant.ErrGroupSize", err)
	}
	if err := Rotate(make([]float32, 320), 256); err == nil {
		t.Error("Rotate of 320 values with G=256 succeeded")
	}
	if err := Rotate(nil, 16); err != nil {
		t.Errorf("Rotate(empty) = %v", err)
	}
}

func TestRotateDoesNotAllocate(t *testing.T) {
	x := make([]float32, 3072)
	for i := range x {
		x[i] = float32(i)
	}
	if n := testing.AllocsPerRun(10, func() { _ = Rotate(x, 256) }); n != 0 {
		t.Errorf("Rotate allocates %v times per call", n)
	}
}

// rotate64 is the fast transform in float64 with the same order of
// operations, the reference for the float32 accuracy measurement.
func rotate64(x []float64, g int) {
	for off := 0; off < len(x); off += g {
		p := x[off : off+g]
		for s := 1; s < g; s *= 4 {
			for base := 0; base < g; base += 4 * s {
				for j := base; j < base+s; j++ {
					a, b, c, d := p[j], p[j+s], p[j+2*s], p[j+3*s]
					h := ((a + b) + (c + d)) * 0.5
					p[j], p[j+s], p[j+2*s], p[j+3*s] = h-d, h-c, h-b, h-a
				}
			}
		}
	}
}

// TestRotateFloat32Accuracy measures what computing the rotation in float32
// instead of float64 costs: the largest rotation error relative to half a
// quantization step (the INT8 rounding error it competes with) and the share
// of INT8 codes that change. The rotation stays in float32 because the
// error is orders of magnitude below the quantization step (asserted here),
// the input weights are at most float32 precise anyway, and float32 halves
// the memory traffic of the hot loop.
func TestRotateFloat32Accuracy(t *testing.T) {
	const rows, in, g = 32, 3072, 256
	w := gaussianWithOutliers(rows, in, 7, 40)
	var worst float64
	changed := 0
	q, _ := NewInt8Rows(in, g)
	codes32 := make([]byte, in)
	scale := make([]float32, 1)
	for r := 0; r < rows; r++ {
		row := w[r*in : (r+1)*in]
		r64 := make([]float64, in)
		for i, v := range row {
			r64[i] = float64(v)
		}
		rotate64(r64, g)
		r32 := append([]float32(nil), row...)
		if err := q.Quantize(codes32, scale, r32); err != nil {
			t.Fatal(err)
		}
		var amax float64
		for _, v := range r64 {
			amax = math.Max(amax, math.Abs(v))
		}
		s64 := amax / 127
		for i := range r64 {
			worst = math.Max(worst, math.Abs(float64(r32[i])-r64[i])/(s64/2))
			c64 := math.Max(-127, math.Min(127, math.RoundToEven(r64[i]/s64)))
			if int8(codes32[i]) != int8(c64) {
				changed++
			}
		}
	}
	t.Logf("float32 rotation error: at most %.2e of half a quantization step; %d of %d codes (%.4f%%) differ from a float64 rotation",
		worst, changed, rows*in, 100*float64(changed)/float64(rows*in))
	if worst > 1e-3 {
		t.Errorf("float32 rotation error is %g of half a step, want < 1e-3", worst)
	}
	if changed > rows*in/1000 {
		t.Errorf("%d codes differ from float64, want at most 0.1%%", changed)
	}
}

func norm2(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}

// gaussianWithOutliers returns rows×in N(0, 0.02²) weights where 8 input
// columns carry values factor times larger, the outlier channels that hurt
// per-row INT8 in real diffusion models.
func gaussianWithOutliers(rows, in int, seed uint64, factor float32) []float32 {
	rng := rand.New(rand.NewPCG(seed, 99))
	w := make([]float32, rows*in)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.02)
	}
	cols := make([]int, 8)
	for i := range cols {
		cols[i] = rng.IntN(in)
	}
	for r := 0; r < rows; r++ {
		for _, c := range cols {
			w[r*in+c] *= factor
		}
	}
	return w
}

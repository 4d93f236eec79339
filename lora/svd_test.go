package lora

import (
	"math"
	"math/rand/v2"
	"testing"
)

// orthoColumns returns k orthonormal columns of length m (row-major
// [m, k]): the first k columns of a product of random Householder
// reflections, orthogonal by construction (no Gram-Schmidt involved).
func orthoColumns(r *rand.Rand, m, k int) []float64 {
	q := make([]float64, m*k)
	for c := 0; c < k; c++ {
		q[c*k+c] = 1
	}
	for h := 0; h < 4; h++ {
		v := make([]float64, m)
		var vv float64
		for i := range v {
			v[i] = r.NormFloat64()
			vv += v[i] * v[i]
		}
		for c := 0; c < k; c++ {
			var d float64
			for i := 0; i < m; i++ {
				d += v[i] * q[i*k+c]
			}
			f := 2 * d / vv
			for i := 0; i < m; i++ {
				q[i*k+c] -= f * v[i]
			}
		}
	}
	return q
}

// spectrumMatrix returns U·diag(s)·Vᵀ [m, n] for random orthonormal U, V.
func spectrumMatrix(r *rand.Rand, m, n int, s []float64) []float32 {
	k := len(s)
	u, v := orthoColumns(r, m, k), orthoColumns(r, n, k)
	d := make([]float32, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var x float64
			for c := 0; c < k; c++ {
				x += u[i*k+c] * s[c] * v[j*k+c]
			}
			d[i*n+j] = float32(x)
		}
	}
	return d
}

func reconstructionError(d []float32, s truncSVD, m, n int) float64 {
	var e float64
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			x := float64(d[i*n+j])
			for c := 0; c < s.k; c++ {
				x -= s.u[i*s.k+c] * s.s[c] * s.v[j*s.k+c]
			}
			e += x * x
		}
	}
	return math.Sqrt(e)
}

func checkOrthonormal(t *testing.T, what string, q []float64, m, k int, tol float64) {
	t.Helper()
	for a := 0; a < k; a++ {
		for b := 0; b < k; b++ {
			var d float64
			for i := 0; i < m; i++ {
				d += q[i*k+a] * q[i*k+b]
			}
			want := 0.0
			if a == b {
				want = 1
			}
			if math.Abs(d-want) > tol {
				t.Fatalf("%s: columns %d·%d = %v", what, a, b, d)
			}
		}
	}
}

func TestExactSVD(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][2]int{{30, 20}, {20, 30}, {17, 17}, {1, 9}, {9, 1}} {
		m, n := sz[0], sz[1]
		d := randn(r, m*n, 1)
		k := min(m, n)
		s := exactSVD(d, m, n, k)
		if e := reconstructionError(d, s, m, n); e > 1e-12*math.Sqrt(float64(m*n)) {
			t.Errorf("%dx%d: reconstruction error %g", m, n, e)
		}
		for i := 1; i < k; i++ {
			if s.s[i] > s.s[i-1] {
				t.Errorf("%dx%d: singular values not sorted: %v", m, n, s.s)
			}
		}
		checkOrthonormal(t, "U", s.u, m, k, 1e-12)
		checkOrthonormal(t, "V", s.v, n, k, 1e-12)
	}
}

// The sketch recovers the leading singular values of a matrix with a known
// spectrum, and its truncation error is within a hair of the optimum
// (the norm of the dropped singular values, Eckart-Young).
func TestRandomizedSVDKnownSpectrum(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const m, n = 300, 200
	s := make([]float64, 60)
	for i := range s {
		s[i] = 10 * math.Pow(0.8, float64(i))
	}
	d := spectrumMatrix(r, m, n, s)
	const k = 12
	for _, workers := range []int{1, 3} {
		got := randomizedSVD(d, m, n, k, svdOptions{oversample: 8, power: 2, seed: 9, workers: workers})
		for i := 0; i < k; i++ {
			if math.Abs(got.s[i]-s[i]) > 1e-5*s[0] {
				t.Errorf("sigma %d = %v, want %v", i, got.s[i], s[i])
			}
		}
		var tail float64
		for _, x := range s[k:] {
			tail += x * x
		}
		tail = math.Sqrt(tail)
		if e := reconstructionError(d, got, m, n); e > 1.001*tail+1e-5 {
			t.Errorf("truncation error %v, optimum %v", e, tail)
		}
		checkOrthonormal(t, "U", got.u, m, k, 1e-9)
		checkOrthonormal(t, "V", got.v, n, k, 1e-9)
	}
	// The split over workers does not change the result.
	a := randomizedSVD(d, m, n, k, svdOptions{oversample: 8, power: 2, seed: 9, workers: 1})
	b := randomizedSVD(d, m, n, k, svdOptions{oversample: 8, power: 2, seed: 9, workers: 4})
	for i := range a.u {
		if a.u[i] != b.u[i] {
			t.Fatal("the result depends on the number of workers")
		}
	}
}

// A difference of rank below the sketch size (q, k, v deltas often are)
// leaves zero directions in the sketch; they must not pollute the factors.
func TestRandomizedSVDRankDeficient(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const m, n = 120, 90
	s := []float64{5, 3, 1}
	d := spectrumMatrix(r, m, n, s)
	got := randomizedSVD(d, m, n, 16, svdOptions{oversample: 8, power: 1, seed: 1})
	if e := reconstructionError(d, got, m, n); e > 1e-5 {
		t.Errorf("reconstruction error %g", e)
	}
	for i := 3; i < got.k; i++ {
		if got.s[i] > 1e-5 {
			t.Errorf("sigma %d = %g, want 0", i, got.s[i])
		}
	}
}

func TestDecomposeEnergy(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const m, n = 80, 64
	s := []float64{8, 4, 2, 1, 0.5, 0.25}
	d := spectrumMatrix(r, m, n, s)
	var total float64
	for _, x := range s {
		total += x * x
	}
	for _, e := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		dec, err := Decompose(d, m, n, "layer", ExtractOptions{Energy: e, MaxRank: 32})
		if err != nil {
			t.Fatal(err)
		}
		// The smallest rank whose share reaches e.
		var acc float64
		want := 0
		for want < len(s) && acc < e*total*(1-1e-9) {
			acc += s[want] * s[want]
			want++
		}
		if dec.Rank != want {
			t.Errorf("energy %v: rank %d, want %d", e, dec.Rank, want)
		}
		if math.Abs(dec.Kept-acc/total) > 1e-6 {
			t.Errorf("energy %v: kept %v, want %v", e, dec.Kept, acc/total)
		}
	}
	// A zero difference gives rank 0 by energy, zero factors of the fixed
	// rank otherwise (so that a writer can lay out the output first); bad
	// options are refused.
	dec, err := Decompose(make([]float32, 12), 3, 4, "zero", ExtractOptions{Energy: 0.9})
	if err != nil || dec.Rank != 0 || dec.Kept != 1 {
		t.Errorf("zero difference by energy: %+v, %v", dec, err)
	}
	dec, err = Decompose(make([]float32, 12), 3, 4, "zero", ExtractOptions{Rank: 5})
	if err != nil || dec.Rank != 3 || len(dec.Up) != 9 || len(dec.Down) != 12 {
		t.Errorf("zero difference at rank 5: %+v, %v", dec, err)
	}
	for _, o := range []ExtractOptions{{}, {Rank: -1}, {Energy: 1.5}} {
		if _, err := Decompose(d, m, n, "x", o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

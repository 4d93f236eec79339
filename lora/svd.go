package lora

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sort"

	"github.com/sdtool/sdtool/internal/workpool"
)

// The linear algebra of extraction, in float64: a randomized range finder
// with power iterations (Halko, Martinsson and Tropp) reduces a large
// difference to a small matrix, and one-sided Jacobi rotations (Hestenes)
// give that matrix's SVD exactly. When the rank asked for is the full rank,
// Jacobi runs on the difference itself and the factors reproduce it to
// rounding.

// truncSVD is D ≈ U·diag(S)·Vᵀ with U [m, k] and V [n, k], both row-major.
type truncSVD struct {
	k    int
	u, v []float64
	s    []float64
}

// svdOptions tunes the randomized sketch.
type svdOptions struct {
	oversample, power int
	seed              uint64
	workers           int
}

// randomizedSVD returns up to k singular triplets of d [m, n] (row-major
// float32), largest first.
func randomizedSVD(d []float32, m, n, k int, o svdOptions) truncSVD {
	full := min(m, n)
	k = min(k, full)
	l := min(k+o.oversample, full)
	if l >= full {
		return exactSVD(d, m, n, k)
	}
	w := o.workers
	if w < 1 {
		w = runtime.GOMAXPROCS(0)
	}
	r := rand.New(rand.NewPCG(o.seed, 0x5eed))
	omega := make([]float64, n*l)
	for i := range omega {
		omega[i] = r.NormFloat64()
	}
	y := mulD(d, m, n, omega, l, w) // [m, l]
	orthonormalize(y, m, l)
	for it := 0; it < o.power; it++ {
		z := mulDT(d, m, n, y, l, w) // [n, l]
		orthonormalize(z, n, l)
		y = mulD(d, m, n, z, l, w)
		orthonormalize(y, m, l)
	}
	// Bᵀ = Dᵀ·Q is [n, l]; its SVD Bᵀ = V·Σ·Ũᵀ gives D ≈ (Q·Ũ)·Σ·Vᵀ.
	bt := mulDT(d, m, n, y, l, w)
	vs, s, ut := jacobi(bt, n, l) // vs [n, l] = V·Σ, ut [l, l] = Ũ
	out := truncSVD{k: k, s: s[:k], u: make([]float64, m*k), v: make([]float64, n*k)}
	for j := 0; j < n; j++ {
		for c := 0; c < k; c++ {
			if s[c] > 0 {
				out.v[j*k+c] = vs[j*l+c] / s[c]
			}
		}
	}
	for i := 0; i < m; i++ {
		qi := y[i*l : (i+1)*l]
		for c := 0; c < k; c++ {
			var acc float64
			for t, q := range qi {
				acc += q * ut[t*l+c]
			}
			out.u[i*k+c] = acc
		}
	}
	return out
}

// exactSVD is the full SVD of d by Jacobi on the taller orientation,
// truncated to k.
func exactSVD(d []float32, m, n, k int) truncSVD {
	out := truncSVD{k: k, u: make([]float64, m*k), v: make([]float64, n*k)}
	if m >= n {
		a := make([]float64, m*n)
		for i, x := range d {
			a[i] = float64(x)
		}
		us, s, v := jacobi(a, m, n) // us [m, n] = U·Σ, v [n, n]
		out.s = s[:k]
		for i := 0; i < m; i++ {
			for c := 0; c < k; c++ {
				if s[c] > 0 {
					out.u[i*k+c] = us[i*n+c] / s[c]
				}
			}
		}
		for j := 0; j < n; j++ {
			copy(out.v[j*k:(j+1)*k], v[j*n:j*n+k])
		}
		return out
	}
	// Dᵀ = V·Σ·Uᵀ.
	a := make([]float64, n*m)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			a[j*m+i] = float64(d[i*n+j])
		}
	}
	vs, s, u := jacobi(a, n, m)
	out.s = s[:k]
	for j := 0; j < n; j++ {
		for c := 0; c < k; c++ {
			if s[c] > 0 {
				out.v[j*k+c] = vs[j*m+c] / s[c]
			}
		}
	}
	for i := 0; i < m; i++ {
		copy(out.u[i*k:(i+1)*k], u[i*m:i*m+k])
	}
	return out
}

// jacobi orthogonalizes the columns of a [m, n] (row-major, m ≥ n) by
// one-sided Jacobi rotations: a·J = W with orthogonal columns. It returns
// W with its columns sorted by norm (largest first), the norms (the
// singular values) and J [n, n] with its columns in the same order, so that
// a = W·Jᵀ and a = U·diag(s)·Jᵀ with U = W/s.
func jacobi(a []float64, m, n int) (w, s, j []float64) {
	// Work on columns: col[c] is column c of a, contiguous.
	col := make([][]float64, n)
	for c := range col {
		col[c] = make([]float64, m)
		for i := 0; i < m; i++ {
			col[c][i] = a[i*n+c]
		}
	}
	vc := make([][]float64, n)
	for c := range vc {
		vc[c] = make([]float64, n)
		vc[c][c] = 1
	}
	norms := make([]float64, n)
	for c := range col {
		norms[c] = dot(col[c], col[c])
	}
	// Converged when every pair is orthogonal to rounding: the error of a
	// dot product grows with its length.
	eps := max(1e-15, float64(m)*2.3e-16)
	for sweep := 0; sweep < 80; sweep++ {
		rotated := false
		for p := 0; p < n-1; p++ {
			for q := p + 1; q < n; q++ {
				alpha, beta := norms[p], norms[q]
				if alpha == 0 || beta == 0 {
					continue
				}
				gamma := dot(col[p], col[q])
				if math.Abs(gamma) <= eps*math.Sqrt(alpha)*math.Sqrt(beta) {
					continue
				}
				rotated = true
				zeta := (beta - alpha) / (2 * gamma)
				t := math.Copysign(1, zeta) / (math.Abs(zeta) + math.Sqrt(1+zeta*zeta))
				cs := 1 / math.Sqrt(1+t*t)
				sn := cs * t
				rotate(col[p], col[q], cs, sn)
				rotate(vc[p], vc[q], cs, sn)
				// Recomputed rather than updated, so that rounding does not
				// accumulate over the sweeps.
				norms[p], norms[q] = dot(col[p], col[p]), dot(col[q], col[q])
			}
		}
		if !rotated {
			break
		}
	}
	order := make([]int, n)
	for c := range order {
		order[c] = c
	}
	sort.SliceStable(order, func(x, y int) bool { return norms[order[x]] > norms[order[y]] })
	w, s, j = make([]float64, m*n), make([]float64, n), make([]float64, n*n)
	for c, oc := range order {
		s[c] = math.Sqrt(norms[oc])
		for i := 0; i < m; i++ {
			w[i*n+c] = col[oc][i]
		}
		for i := 0; i < n; i++ {
			j[i*n+c] = vc[oc][i]
		}
	}
	return w, s, j
}

// rotate applies the plane rotation (c, s) to columns x and y.
func rotate(x, y []float64, c, s float64) {
	y = y[:len(x)]
	for i, xv := range x {
		yv := y[i]
		x[i] = c*xv - s*yv
		y[i] = s*xv + c*yv
	}
}

func dot(x, y []float64) float64 {
	y = y[:len(x)]
	var s0, s1 float64
	i := 0
	for ; i+2 <= len(x); i += 2 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return s0 + s1
}

// orthonormalize replaces the columns of y [m, l] (row-major) by an
// orthonormal basis of their span (modified Gram-Schmidt, twice). A column
// that is (numerically) in the span of the ones before it becomes zero: the
// sketch of a difference of rank below l has fewer directions.
func orthonormalize(y []float64, m, l int) {
	col := make([][]float64, l)
	for c := range col {
		col[c] = make([]float64, m)
		for i := 0; i < m; i++ {
			col[c][i] = y[i*l+c]
		}
	}
	for c := 0; c < l; c++ {
		v := col[c]
		n0 := math.Sqrt(dot(v, v))
		for pass := 0; pass < 2; pass++ {
			for p := 0; p < c; p++ {
				if h := dot(col[p], v); h != 0 {
					axpy(-h, col[p], v)
				}
			}
		}
		n := math.Sqrt(dot(v, v))
		if n <= 1e-12*n0 || n == 0 {
			clear(v)
			continue
		}
		for i := range v {
			v[i] /= n
		}
	}
	for c := range col {
		for i := 0; i < m; i++ {
			y[i*l+c] = col[c][i]
		}
	}
}

func axpy(a float64, x, y []float64) {
	y = y[:len(x)]
	for i, xv := range x {
		y[i] += a * xv
	}
}

// parallel runs f over [0, n) split into w contiguous ranges.
func parallel(n, w int, f func(lo, hi int)) {
	if n <= 0 {
		f(0, n)
		return
	}
	workpool.Ranges(n, max(1, w), func(_, lo, hi int) error {
		f(lo, hi)
		return nil
	})
}

// mulD returns d [m, n] times x [n, l]; rows are independent, so the split
// over workers does not change the result.
func mulD(d []float32, m, n int, x []float64, l, w int) []float64 {
	y := make([]float64, m*l)
	parallel(m, w, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			yi := y[i*l : (i+1)*l]
			for j, dv := range d[i*n : (i+1)*n] {
				if dv != 0 {
					axpy(float64(dv), x[j*l:(j+1)*l], yi)
				}
			}
		}
	})
	return y
}

// mulDT returns dᵀ [n, m] times y [m, l]; each output row sums over the
// rows of d in order, so the result does not depend on the split either.
func mulDT(d []float32, m, n int, y []float64, l, w int) []float64 {
	z := make([]float64, n*l)
	parallel(n, w, func(lo, hi int) {
		for i := 0; i < m; i++ {
			yi := y[i*l : (i+1)*l]
			row := d[i*n : (i+1)*n]
			for j := lo; j < hi; j++ {
				if dv := row[j]; dv != 0 {
					axpy(float64(dv), yi, z[j*l:(j+1)*l])
				}
			}
		}
	})
	return z
}

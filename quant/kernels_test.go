package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// kernelInput fills x (Gaussian with outliers, some exact halves and
// integers, so that rounding ties occur) and w (positive, some zeros).
func kernelInput(r *rand.Rand, x, w []float32) {
	gaussRow(r, x)
	for i := range x {
		switch r.IntN(8) {
		case 0:
			x[i] = float32(r.IntN(33)-16) / 2
		case 1:
			x[i] = float32(r.IntN(9) - 4)
		}
		w[i] = float32(r.Float64() * 4)
		if r.IntN(6) == 0 {
			w[i] = 0
		}
	}
}

// The lane kernels in use (assembly where the CPU has it) give the bits of
// the portable Go kernels.
func TestQxLaneSumsMatchGo(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 101))
	for iter := range 3000 {
		n := 1 + r.IntN(32)
		if iter%2 == 0 {
			n = []int{16, 32}[iter/2%2]
		}
		nmax := []int32{4, 8, 16, 32}[r.IntN(4)]
		var x, w [32]float32
		kernelInput(r, x[:n], w[:n])
		var amax float32
		for i := range n {
			amax = max(amax, cFabs(x[i]))
		}
		var num [qxLanes]float32
		for k := range num {
			num[k] = float32(r.NormFloat64()) * float32(nmax)
			if k%5 == 0 {
				num[k] = 0.5 * float32(r.IntN(9)-4) // exact halves of the integer x
			}
		}
		vmax := max(amax, 1e-3)
		if r.IntN(2) == 0 {
			vmax = -vmax
		}
		if iter%7 == 0 {
			vmax = 1
		}
		var a1, a2, b1, b2 [qxLanes]float32
		qxLaneSums(x[:n], w[:n], &num, vmax, -nmax, nmax-1, &a1, &a2, true)
		qxLaneSumsGo(x[:n], w[:n], &num, vmax, -nmax, nmax-1, &b1, &b2)
		for k := range a1 {
			if math.Float32bits(a1[k]) != math.Float32bits(b1[k]) || math.Float32bits(a2[k]) != math.Float32bits(b2[k]) {
				t.Fatalf("n=%d nmax=%d lane %d (num %g, vmax %g): kernel sums %g %g, Go %g %g", n, nmax, k, num[k], vmax, a1[k], a2[k], b1[k], b2[k])
			}
		}
	}
}

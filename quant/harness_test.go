package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// harnessSeed is the seed every shared test input is derived from, so that
// a failure reproduces exactly.
const harnessSeed = 0x5d7001

// rowSet is a named batch of rows for codec tests.
type rowSet struct {
	name    string
	nPerRow int
	data    []float32 // len(data) is a multiple of nPerRow
}

// rows returns the number of rows in s.
func (s rowSet) rows() int { return len(s.data) / s.nPerRow }

// weightSet is a named importance vector; vec is nil for the unweighted path.
type weightSet struct {
	name string
	vec  []float32
}

// roundUp rounds n up to a multiple of block.
func roundUp(n, block int) int { return (n + block - 1) / block * block }

// gaussRow fills dst with N(0, 1) values and, at random about one position in
// 64, an outlier of 8 to 30 times that size.
func gaussRow(r *rand.Rand, dst []float32) {
	for i := range dst {
		v := r.NormFloat64()
		if r.IntN(64) == 0 {
			v *= 8 + 22*r.Float64()
		}
		dst[i] = float32(v)
	}
}

// testRowSets returns the shared row sets for a type with the given block
// size: Gaussian rows with outliers at row lengths from one block to 16384,
// all-zero, constant, tiny (1e-30) and huge (1e30) magnitudes, subnormals,
// alternating signs, and rows that mix such blocks. The result depends only
// on seed and block.
func testRowSets(seed uint64, block int) []rowSet {
	r := rand.New(rand.NewPCG(seed, uint64(block)))
	var sets []rowSet
	add := func(name string, n, rows int, fill func(row int, dst []float32)) {
		data := make([]float32, n*rows)
		for i := range rows {
			fill(i, data[i*n:(i+1)*n])
		}
		sets = append(sets, rowSet{name: name, nPerRow: n, data: data})
	}
	gauss := func(_ int, dst []float32) { gaussRow(r, dst) }
	add(fmt.Sprintf("gauss-n%d", block), block, 16, gauss)
	if n := roundUp(3*block, block); n != block && n < 4096 {
		add(fmt.Sprintf("gauss-n%d", n), n, 8, gauss)
	}
	add("gauss-n4096", roundUp(4096, block), 3, gauss)
	add("gauss-n16384", roundUp(16384, block), 2, gauss)

	n := roundUp(1024, block)
	add("zero", n, 2, func(int, []float32) {})
	consts := []float32{1, -3.5, 0.1, 12345}
	add("constant", n, len(consts), func(row int, dst []float32) {
		for i := range dst {
			dst[i] = consts[row]
		}
	})
	add("tiny", n, 3, func(_ int, dst []float32) {
		gaussRow(r, dst)
		for i := range dst {
			dst[i] *= 1e-30
		}
	})
	add("huge", n, 3, func(_ int, dst []float32) {
		gaussRow(r, dst)
		for i := range dst {
			dst[i] *= 1e30
		}
	})
	add("subnormal", n, 3, func(_ int, dst []float32) {
		for i := range dst {
			// Bit patterns below the smallest normal, both signs.
			bits := r.Uint32() & 0x007fffff
			if r.IntN(2) == 0 {
				bits |= 0x80000000
			}
			dst[i] = math.Float32frombits(bits)
		}
	})
	add("alternating", n, 3, func(row int, dst []float32) {
		for i := range dst {
			v := float32(0.5 + r.Float64())
			if row == 0 {
				v = 1 // exactly ±1
			}
			if i%2 == 1 {
				v = -v
			}
			dst[i] = v
		}
	})
	// Signed zeros: ±0 compare equal, so which one a minimum or maximum
	// search keeps (and stores as the f16 offset) depends on their order.
	add("signed-zeros", n, 2, func(_ int, dst []float32) {
		negZero := float32(math.Copysign(0, -1))
		for i := range dst {
			switch r.IntN(4) {
			case 0:
				dst[i] = 0
			case 1:
				dst[i] = negZero
			case 2:
				dst[i] = float32(math.Abs(r.NormFloat64()))
			default:
				dst[i] = -float32(math.Abs(r.NormFloat64()))
			}
			if i/32%3 == 1 && dst[i] < 0 { // some blocks with no negative values
				dst[i] = -dst[i]
			}
			if i/32%3 == 2 && dst[i] > 0 { // and some with no positive ones
				dst[i] = -dst[i]
			}
		}
	})
	// Each block of a row is a different kind, so that block boundaries and
	// per-block special cases are exercised inside one row.
	add("mixed", roundUp(8*block, block), 4, func(_ int, dst []float32) {
		for b := 0; b < len(dst); b += block {
			blk := dst[b : b+block]
			switch r.IntN(8) {
			case 0: // zero block
			case 1: // constant block
				v := float32(r.NormFloat64())
				for i := range blk {
					blk[i] = v
				}
			case 2: // one non-zero value
				blk[r.IntN(block)] = float32(r.NormFloat64() * 10)
			case 3: // all positive
				for i := range blk {
					blk[i] = float32(math.Abs(r.NormFloat64()))
				}
			case 4: // all negative
				for i := range blk {
					blk[i] = -float32(math.Abs(r.NormFloat64()))
				}
			case 5: // small integers, often exactly representable
				for i := range blk {
					blk[i] = float32(r.IntN(17) - 8)
				}
			default:
				gaussRow(r, blk)
			}
		}
	})
	return sets
}

// testWeights returns the shared importance vectors for rows of n: none
// (ggml's unweighted path), all ones (what stable-diffusion.cpp passes when
// there is no imatrix), random positive values spanning four decades, and
// random values with about a quarter zeros.
func testWeights(seed uint64, n int) []weightSet {
	r := rand.New(rand.NewPCG(seed, uint64(n)<<1|1))
	ones := make([]float32, n)
	pos := make([]float32, n)
	zeros := make([]float32, n)
	for i := range n {
		ones[i] = 1
		pos[i] = float32(math.Pow(10, 4*r.Float64()-2))
		if r.IntN(4) != 0 {
			zeros[i] = float32(4 * r.Float64())
		}
	}
	return []weightSet{{"ref", nil}, {"ones", ones}, {"random", pos}, {"zeros", zeros}}
}

// testSpecialRowSets returns rows holding NaN and ±Inf: single NaNs and Infs
// among Gaussian values, a NaN first in its block (it starts the running
// maximum of some quantizers), whole blocks of NaN or Inf, and Inf next to
// NaN. They are kept apart from testRowSets because some of ggml's
// quantizers assert (and abort the process) on such input.
func testSpecialRowSets(seed uint64, block int) []rowSet {
	r := rand.New(rand.NewPCG(seed, uint64(block)^0xbad))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	block = max(block, 32) // the unit of the patterns below
	n := 8 * block
	rows := 6
	data := make([]float32, n*rows)
	gaussRow(r, data)
	for row := range rows {
		x := data[row*n : (row+1)*n]
		for b := 0; b < n; b += block {
			blk := x[b : b+block]
			switch (row*8 + b/block) % 9 {
			case 0:
				blk[r.IntN(block)] = nan
			case 1:
				blk[0] = nan
			case 2:
				blk[r.IntN(block)] = inf
			case 3:
				blk[r.IntN(block)] = -inf
			case 4:
				for i := range blk {
					blk[i] = nan
				}
			case 5:
				for i := range blk {
					blk[i] = inf
				}
			case 6:
				blk[0], blk[1] = inf, nan
			case 7:
				blk[block-1] = nan
			}
		}
	}
	return []rowSet{{name: "nan-inf", nPerRow: n, data: data}}
}

// kernelMode is a setting of the kernel flags that the oracle tests run.
type kernelMode struct {
	name  string
	flags simdFlags
}

// kernelModes lists the settings every oracle test runs: the scalar
// searches ("scalar"), and every search in the lane form ("lanes"), with
// this CPU's assembly kernels where it has them and with the portable Go
// kernels otherwise (a purego build, another architecture), so that the
// lane-form drivers are tested everywhere; on a CPU with AVX-512, the lane
// form once with its AVX-512 kernels ("lanes-wide") and once without.
func kernelModes() []kernelMode {
	lanes := simdFlags{qx: true, qkx: true, legacy: true, floats: true}
	modes := []kernelMode{{"scalar", simdFlags{}}, {"lanes", lanes}}
	if simdDetected.wide {
		lanes.wide = true
		modes = append(modes, kernelMode{"lanes-wide", lanes})
	}
	return modes
}

// withKernels runs fn with the kernel flags set to f.
func withKernels(f simdFlags, fn func()) {
	old := simd
	simd = f
	defer func() { simd = old }()
	fn()
}

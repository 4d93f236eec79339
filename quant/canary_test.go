package quant

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// fmaCase is one q4_0 element where a fused multiply-add changes the code:
// block holds it at index pos together with the block maximum that fixes
// the scale.
type fmaCase struct {
	block          [32]float32
	pos            int
	unfused, fused uint8 // the 4-bit code each evaluation gives
}

// fusedF32 returns x*y+z rounded once to float32, as fmaf does: the sum is
// formed exactly in a big.Float and rounded to nearest even.
func fusedF32(x, y, z float32) float32 {
	p := new(big.Float).SetPrec(200).SetFloat64(float64(x))
	p.Mul(p, new(big.Float).SetFloat64(float64(y)))
	p.Add(p, new(big.Float).SetFloat64(float64(z)))
	f, _ := p.Float32()
	return f
}

// q4Code is the q4_0 reference code MIN(15, (int8_t)v).
func q4Code(v float32) uint8 { return uint8(min(15, int8(cCvtt(v)))) }

// findFMACases searches, deterministically, for q4_0 inputs where
// trunc(x*id + 8.5) differs between unfused float32 evaluation (round the
// product, then the sum) and a fused multiply-add (one rounding). It scans
// the few floats around each level boundary (k - 8.5)·d for random scales d.
func findFMACases(want int) []fmaCase {
	r := rand.New(rand.NewPCG(harnessSeed, 0xf3a))
	var out []fmaCase
	for trial := 0; trial < 20000 && len(out) < want; trial++ {
		d := float32(0.5 + 1.5*r.Float64())
		m := -8 * d // the block maximum, so that the scale is exactly d
		if d2 := m / -8; d2 != d {
			continue
		}
		id := 1 / d
		for k := 1; k <= 15; k++ {
			x := float32(float64(k)-8.5) * d
			for range 8 {
				x = math.Nextafter32(x, float32(math.Inf(-1)))
			}
			for range 16 {
				x = math.Nextafter32(x, float32(math.Inf(1)))
				u := q4Code(float32(x*id) + 8.5)
				f := q4Code(fusedF32(x, id, 8.5))
				if u == f {
					continue
				}
				var c fmaCase
				c.block[0] = m
				for i := 1; i < 32; i++ {
					c.block[i] = float32(r.Float64()-0.5) * d // small, never the maximum
				}
				c.pos = 1 + r.IntN(31)
				c.block[c.pos] = x
				c.unfused, c.fused = u, f
				out = append(out, c)
			}
		}
	}
	return out
}

// code returns the 4-bit code of element pos in a q4_0 block.
func q4CodeAt(blk []byte, pos int) uint8 {
	if pos < 16 {
		return blk[2+pos] & 15
	}
	return blk[2+pos-16] >> 4
}

// TestGoQ4_0IsUnfused checks that the Go codec rounds the product before the
// addition on inputs where fusing would change the result; on arm64 it
// would fail if the explicit float32 conversions were dropped.
func TestGoQ4_0IsUnfused(t *testing.T) {
	cases := findFMACases(64)
	if len(cases) < 16 {
		t.Fatalf("search found only %d inputs where fusing changes q4_0", len(cases))
	}
	for i, c := range cases {
		var y [q4_0Bytes]byte
		quantizeBlockQ4_0(&y, &c.block)
		if got := q4CodeAt(y[:], c.pos); got != c.unfused {
			t.Fatalf("case %d (x=%g, code unfused %d, fused %d): Go codec gave %d", i, c.block[c.pos], c.unfused, c.fused, got)
		}
	}
}

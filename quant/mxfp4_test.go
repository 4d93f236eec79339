package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMXFP4NearestLevelMatchesSearch compares the pruned, branch-free level
// search with ggml's plain 16-level scan on many values per scale,
// including ties (midpoints), zeros of both signs, NaN and Inf.
func TestMXFP4NearestLevelMatchesSearch(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 44))
	for _, e := range []uint8{0, 1, 2, 100, 127, 130, 200, 254, 255} {
		d := e8m0Half(e)
		var lv [16]float32
		for k, q := range mxfp4Values {
			lv[k] = float32(q) * d
		}
		xs := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
		for k := range 16 {
			for k2 := range 16 {
				m := (lv[k] + lv[k2]) / 2
				xs = append(xs, m, math.Nextafter32(m, 0), -m)
			}
		}
		for range 2000 {
			xs = append(xs, float32(r.NormFloat64())*d*8)
		}
		for _, x := range xs {
			if got, want := mxfp4NearestLevel(x, &lv), mxfp4Nearest(x, d); got != want {
				t.Fatalf("e=%d x=%g: got %d, want %d", e, x, got, want)
			}
		}
	}
}

// TestMXFP4CodeMatchesSearch checks the threshold form against ggml's scan
// for every scale it is used with, at each level, midpoint and their
// neighbours, both signs, and random values.
func TestMXFP4CodeMatchesSearch(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 45))
	for e := 3; e <= 252; e++ {
		d := e8m0Half(uint8(e))
		var thr [7]uint32
		for k, m := range mxfp4Mids {
			thr[k] = math.Float32bits(m * d)
		}
		xs := []float32{0, float32(math.Copysign(0, -1)), 16 * d, -16 * d}
		for _, q := range []float32{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10, 12} {
			v := q * d
			for _, p := range []float32{v, math.Nextafter32(v, 0), math.Nextafter32(v, float32(math.Inf(1)))} {
				xs = append(xs, p, -p)
			}
		}
		for range 200 {
			xs = append(xs, float32(r.NormFloat64())*d*6)
		}
		for _, x := range xs {
			if math.IsInf(float64(x), 0) {
				continue // 16·d overflows at the largest scales; blocks with Inf take the other path
			}
			if got, want := mxfp4Code(x, &thr), mxfp4Nearest(x, d); got != want {
				t.Fatalf("e=%d x=%g: got %d, want %d", e, x, got, want)
			}
		}
	}
}

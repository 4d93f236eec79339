//go:build cgo

package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native/ggmltest"
)

// The k-quant and iq4_xs codecs against the linked ggml, both paths, on the
// shared inputs: bytes of ggml_quantize_chunk and float bits of its to_float.

func TestQ2KMatchesGGML(t *testing.T)   { checkAgainstGGML(t, formats.Q2_K) }
func TestQ3KMatchesGGML(t *testing.T)   { checkAgainstGGML(t, formats.Q3_K) }
func TestQ4KMatchesGGML(t *testing.T)   { checkAgainstGGML(t, formats.Q4_K) }
func TestQ5KMatchesGGML(t *testing.T)   { checkAgainstGGML(t, formats.Q5_K) }
func TestQ6KMatchesGGML(t *testing.T)   { checkAgainstGGML(t, formats.Q6_K) }
func TestIQ4XSMatchesGGML(t *testing.T) { checkAgainstGGML(t, formats.IQ4_XS) }

// Random block bytes, including scales no quantizer writes, must decode to
// ggml's floats.
func TestKQuantDequantRandomMatchesGGML(t *testing.T) {
	for _, typ := range []formats.DType{formats.Q2_K, formats.Q3_K, formats.Q4_K, formats.Q5_K, formats.Q6_K, formats.IQ4_XS} {
		t.Run(typ.String(), func(t *testing.T) { checkDequantRandom(t, typ) })
	}
}

// NaN and ±Inf give exactly the bytes ggml's arithmetic gives; this pins
// down what such rows do (ggml's k-quants do not abort on them).
func TestKQuantSpecialsMatchGGML(t *testing.T) {
	for _, typ := range []formats.DType{formats.Q2_K, formats.Q3_K, formats.Q4_K, formats.Q5_K, formats.Q6_K, formats.IQ4_XS} {
		t.Run(typ.String(), func(t *testing.T) { checkSpecialsAgainstGGML(t, typ) })
	}
}

// The golden digests of kquants_test.go are ggml's own bytes.
func TestKQuantGoldenIsGGML(t *testing.T) {
	src, n, w := kquantGoldenInput()
	for _, typ := range kquantTypes {
		for _, path := range []string{"ref", "imatrix"} {
			weights := w
			if path == "ref" {
				weights = nil
			}
			want, err := ggmltest.QuantizeChunk(typ, src, n, weights)
			if err != nil {
				t.Fatal(err)
			}
			key := typ.String() + "/" + path
			if got := digest(want); got != kquantGolden[key] {
				t.Errorf("%s: ggml's digest is %s, the table has %s", key, got, kquantGolden[key])
			}
		}
	}
}

// kquantRandomBlocks returns rows of super-blocks that each follow a random
// distribution (scaled and shifted Gaussians, one-signed, uniform, sparse,
// few distinct values, integer grids, heavy tails), to exercise the
// candidate searches far from the shared inputs.
func kquantRandomBlocks(r *rand.Rand, nblocks int) []float32 {
	x := make([]float32, 256*nblocks)
	for b := range nblocks {
		blk := x[256*b : 256*(b+1)]
		scale := math.Pow(10, 6*r.Float64()-3)
		shift := 0.0
		if r.IntN(3) == 0 {
			shift = scale * 3 * r.NormFloat64()
		}
		kind := r.IntN(7)
		for i := range blk {
			var v float64
			switch kind {
			case 0:
				v = r.NormFloat64()
			case 1:
				v = math.Abs(r.NormFloat64())
			case 2:
				v = r.Float64()
			case 3:
				if r.IntN(10) == 0 {
					v = r.NormFloat64() * 5
				}
			case 4:
				v = float64(r.IntN(3)) - 1
			case 5:
				v = float64(r.IntN(64) - 32)
			default:
				v = r.ExpFloat64() * float64(1-2*r.IntN(2))
			}
			blk[i] = float32(v*scale + shift)
		}
	}
	return x
}

func TestKQuantRandomBlocksMatchGGML(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	const n = 2048
	src := kquantRandomBlocks(r, 8*32)
	weightSets := map[string][]float32{"ref": nil}
	for _, name := range []string{"wide", "sparse", "negative"} {
		w := make([]float32, n)
		for i := range w {
			switch name {
			case "wide":
				w[i] = float32(math.Pow(10, 8*r.Float64()-4))
			case "sparse":
				if r.IntN(8) == 0 {
					w[i] = float32(r.Float64())
				}
			case "negative":
				w[i] = float32(r.NormFloat64())
			}
		}
		weightSets[name] = w
	}
	for _, typ := range kquantTypes {
		for name, w := range weightSets {
			t.Run(typ.String()+"/"+name, func(t *testing.T) {
				compareWithGGML(t, typ, rowSet{name: "random-blocks", nPerRow: n, data: src}, weightSet{name, w})
			})
		}
	}
}

//go:build cgo

package quant

import (
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
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
			want, err := native.QuantizeChunk(typ, src, n, weights)
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

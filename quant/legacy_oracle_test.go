//go:build cgo

package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native/ggmltest"
)

func TestOracleQ4_0(t *testing.T) { checkAgainstGGML(t, formats.Q4_0) }
func TestOracleQ4_1(t *testing.T) { checkAgainstGGML(t, formats.Q4_1) }
func TestOracleQ5_0(t *testing.T) { checkAgainstGGML(t, formats.Q5_0) }
func TestOracleQ5_1(t *testing.T) { checkAgainstGGML(t, formats.Q5_1) }
func TestOracleQ8_0(t *testing.T) { checkAgainstGGML(t, formats.Q8_0) }

func TestDequantRandomLegacy(t *testing.T) {
	for _, typ := range []formats.DType{formats.Q4_0, formats.Q4_1, formats.Q5_0, formats.Q5_1, formats.Q8_0} {
		t.Run(typ.String(), func(t *testing.T) { checkDequantRandom(t, typ) })
	}
}

func TestOracleSpecialsLegacy(t *testing.T) {
	for _, typ := range []formats.DType{formats.F32, formats.F16, formats.BF16, formats.Q4_0, formats.Q4_1, formats.Q5_0, formats.Q5_1, formats.Q8_0} {
		t.Run(typ.String(), func(t *testing.T) { checkSpecialsAgainstGGML(t, typ) })
	}
}

// TestDequantQ8KAndQ8_1MatchGGML checks q8_K against ggml's
// dequantize_row_q8_K and q8_1 against ggml's q8_0 decoder on the same d and
// quants (ggml has no q8_1 decoder; the stored sum plays no part).
func TestDequantQ8KAndQ8_1MatchGGML(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 81))
	const blocks = 64
	k := make([]byte, blocks*q8_KBytes)
	for i := range k {
		k[i] = byte(r.Uint32())
	}
	for b := range blocks {
		// Any d, including Inf and NaN patterns, every 7th block.
		if b%7 != 0 {
			binary.LittleEndian.PutUint32(k[b*q8_KBytes:], math.Float32bits(float32(r.NormFloat64())))
		}
	}
	got := make([]float32, blocks*256)
	if err := DequantizeRows(formats.Q8_K, got, k, 1); err != nil {
		t.Fatal(err)
	}
	want, err := ggmltest.DequantizeQ8K(k, len(got))
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("q8_K element %d: got %g, ggml %g", i, got[i], want[i])
		}
	}
	q1 := make([]byte, blocks*q8_1Bytes)
	for i := range q1 {
		q1[i] = byte(r.Uint32())
	}
	q0 := make([]byte, 0, blocks*q8_0Bytes)
	for b := range blocks {
		blk := q1[b*q8_1Bytes : (b+1)*q8_1Bytes]
		q0 = append(append(q0, blk[:2]...), blk[4:]...)
	}
	got1 := make([]float32, blocks*32)
	if err := DequantizeRows(formats.Q8_1, got1, q1, 1); err != nil {
		t.Fatal(err)
	}
	want1, err := ggmltest.Dequantize(formats.Q8_0, q0, len(got1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range got1 {
		if math.Float32bits(got1[i]) != math.Float32bits(want1[i]) && !(got1[i] != got1[i] && want1[i] != want1[i]) {
			t.Fatalf("q8_1 element %d: got %g, ggml %g", i, got1[i], want1[i])
		}
	}
}

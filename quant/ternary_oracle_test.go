//go:build cgo

package quant

import (
	"math"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func TestOracleIQ4_NL(t *testing.T) { checkAgainstGGML(t, formats.IQ4_NL) }
func TestOracleMXFP4(t *testing.T)  { checkAgainstGGML(t, formats.MXFP4) }
func TestOracleTQ1_0(t *testing.T)  { checkAgainstGGML(t, formats.TQ1_0) }
func TestOracleTQ2_0(t *testing.T)  { checkAgainstGGML(t, formats.TQ2_0) }

func TestOracleSpecialsSmall(t *testing.T) {
	for _, typ := range []formats.DType{formats.IQ4_NL, formats.MXFP4, formats.TQ1_0, formats.TQ2_0} {
		t.Run(typ.String(), func(t *testing.T) { checkSpecialsAgainstGGML(t, typ) })
	}
}

func TestDequantRandomSmall(t *testing.T) {
	for _, typ := range []formats.DType{formats.IQ4_NL, formats.MXFP4, formats.TQ1_0, formats.TQ2_0} {
		t.Run(typ.String(), func(t *testing.T) { checkDequantRandom(t, typ) })
	}
}

// TestMXFP4ExponentEdges puts the block maximum at, just above and in the
// 48 floats just below every power of two in the float32 range, where
// floor(log2f(amax)) is decided by the last bit of log2f's rounding.
func TestMXFP4ExponentEdges(t *testing.T) {
	var x []float32
	for k := -149; k < 128; k++ {
		p := float32(math.Ldexp(1, k))
		vals := []float32{p, math.Nextafter32(p, 2*p), p * 1.5}
		below := p
		for range 48 { // the 48 floats just below 2^k
			below = math.Nextafter32(below, 0)
			vals = append(vals, below)
		}
		for _, v := range vals {
			blk := make([]float32, 32)
			for i := range blk {
				blk[i] = v * float32(i%7) / 7
			}
			blk[k&31] = -v
			x = append(x, blk...)
		}
	}
	rs := rowSet{name: "pow2-edges", nPerRow: 32, data: x}
	compareWithGGML(t, formats.MXFP4, rs, weightSet{name: "ref"})
}

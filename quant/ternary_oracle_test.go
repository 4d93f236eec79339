//go:build cgo

package quant

import (
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

//go:build cgo

package quant

import (
	"testing"

	"github.com/sdtool/sdtool/formats"
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

//go:build cgo

package quant

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native/ggmltest"
)

// sweepFloats returns every float32 whose low 13 bits are one of a few
// rounding-critical patterns, over all 2^19 values of the high bits, plus
// sampleFloats: about 4.5 million values that include every f16 exponent,
// every tie, and every value just either side of a tie.
func sweepFloats() []float32 {
	lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x7fff & 0x1fff, 0x0800}
	out := make([]float32, 0, len(lows)<<19)
	for hi := uint32(0); hi < 1<<19; hi++ {
		for _, lo := range lows {
			out = append(out, math.Float32frombits(hi<<13|lo))
		}
	}
	return append(out, sampleFloats(20000)...)
}

func TestF16MatchesGGML(t *testing.T) {
	src := sweepFloats()
	want := ggmltest.FP32ToFP16Row(src)
	row := make([]byte, 2*len(src))
	F32ToF16Row(row, src)
	for i, f := range src {
		if got := F32ToF16(f); got != want[i] {
			t.Fatalf("f32 %g (%#08x): got %#04x, ggml %#04x", f, math.Float32bits(f), got, want[i])
		}
		if got := binary.LittleEndian.Uint16(row[2*i:]); got != want[i] {
			t.Fatalf("row element %d, f32 %g (%#08x): got %#04x, ggml %#04x", i, f, math.Float32bits(f), got, want[i])
		}
	}
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	wantF := ggmltest.FP16ToFP32Row(all)
	for i, h := range all {
		if got := F16ToF32(h); math.Float32bits(got) != math.Float32bits(wantF[i]) {
			t.Fatalf("f16 %#04x: got %#08x, ggml %#08x", h, math.Float32bits(got), math.Float32bits(wantF[i]))
		}
	}
}

func TestBF16MatchesGGML(t *testing.T) {
	src := sweepFloats()
	want := ggmltest.FP32ToBF16RowRef(src)
	row := make([]byte, 2*len(src))
	F32ToBF16Row(row, src)
	for i, f := range src {
		if got := F32ToBF16(f); got != want[i] {
			t.Fatalf("f32 %g (%#08x): got %#04x, ggml %#04x", f, math.Float32bits(f), got, want[i])
		}
		if got := binary.LittleEndian.Uint16(row[2*i:]); got != want[i] {
			t.Fatalf("row element %d, f32 %g (%#08x): got %#04x, ggml %#04x", i, f, math.Float32bits(f), got, want[i])
		}
	}
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	wantF := ggmltest.BF16ToFP32Row(all)
	for i, h := range all {
		if got := BF16ToF32(h); math.Float32bits(got) != math.Float32bits(wantF[i]) {
			t.Fatalf("bf16 %#04x: got %#08x, ggml %#08x", h, math.Float32bits(got), math.Float32bits(wantF[i]))
		}
	}
}

func TestOracleF32(t *testing.T)  { checkAgainstGGML(t, formats.F32) }
func TestOracleF16(t *testing.T)  { checkAgainstGGML(t, formats.F16) }
func TestOracleBF16(t *testing.T) { checkAgainstGGML(t, formats.BF16) }

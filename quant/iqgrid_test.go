package quant

import (
	"encoding/binary"
	"math/bits"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// TestIQGridTableShapes checks properties that define the lattices: the
// magnitudes each grid may hold, that grid points are distinct, and that
// ksigns completes 7 sign bits with an even-parity 8th.
func TestIQGridTableShapes(t *testing.T) {
	allowed := func(vals ...byte) map[byte]bool {
		m := map[byte]bool{}
		for _, v := range vals {
			m[v] = true
		}
		return m
	}
	check64 := func(name string, grid []uint64, ok map[byte]bool) {
		seen := map[uint64]bool{}
		for i, g := range grid {
			if seen[g] {
				t.Errorf("%s[%d] = %#x repeats an earlier point", name, i, g)
			}
			seen[g] = true
			for j := range 8 {
				if b := byte(g >> (8 * j)); !ok[b] {
					t.Errorf("%s[%d] byte %d = %d is not a level of the grid", name, i, j, b)
				}
			}
		}
	}
	check32 := func(name string, grid []uint32, ok map[byte]bool) {
		seen := map[uint32]bool{}
		for i, g := range grid {
			if seen[g] {
				t.Errorf("%s[%d] = %#x repeats an earlier point", name, i, g)
			}
			seen[g] = true
			for j := range 4 {
				if b := byte(g >> (8 * j)); !ok[b] {
					t.Errorf("%s[%d] byte %d = %d is not a level of the grid", name, i, j, b)
				}
			}
		}
	}
	// iq2 levels are 1, 3, 5 on a scale of 8 (stored as 8, 25, 43).
	iq2 := allowed(0x08, 0x19, 0x2b)
	check64("iq2xxsGrid", iq2xxsGrid[:], iq2)
	check64("iq2xsGrid", iq2xsGrid[:], iq2)
	check64("iq2sGrid", iq2sGrid[:], iq2)
	check32("iq3xxsGrid", iq3xxsGrid[:], allowed(4, 12, 20, 28, 36, 44, 52, 62))
	check32("iq3sGrid", iq3sGrid[:], allowed(1, 3, 5, 7, 9, 11, 13, 15))
	check64("iq1sGrid", iq1sGrid[:], allowed(0xff, 0x00, 0x01)) // int8 -1, 0, 1
	for i, s := range ksignsIQ2XS {
		if int(s&127) != i || bits.OnesCount8(s)%2 != 0 {
			t.Errorf("ksignsIQ2XS[%d] = %d, want the index with an even-parity top bit", i, s)
		}
	}
}

// decodeOne decodes one block of typ with the registered codec.
func decodeOne(t *testing.T, typ formats.DType, blk []byte) []float32 {
	t.Helper()
	if len(blk) != typ.Info().BlockBytes {
		t.Fatalf("%s: test block is %d bytes, want %d", typ, len(blk), typ.Info().BlockBytes)
	}
	out := make([]float32, 256)
	if err := DequantizeRows(typ, out, blk, 1); err != nil {
		t.Fatal(err)
	}
	return out
}

// expectValues compares selected elements with values worked out by hand
// from the block layout.
func expectValues(t *testing.T, typ formats.DType, got []float32, want map[int]float32) {
	t.Helper()
	for i, w := range want {
		if got[i] != w {
			t.Errorf("%s element %d = %g, want %g", typ, i, got[i], w)
		}
	}
}

// TestIQGridHandBlocks decodes hand-built blocks and checks elements against
// values derived from the layout, independently of ggml.
func TestIQGridHandBlocks(t *testing.T) {
	const one = 0x3c00 // f16 1.0
	const two = 0x4000 // f16 2.0

	t.Run("iq2_xxs", func(t *testing.T) {
		blk := make([]byte, 66)
		binary.LittleEndian.PutUint16(blk, two)
		// Group 1 of sub-block 0: grid point 0 (all 8s). Sign group 1 = 1,
		// ksigns[1] = 129 flips elements 8 and 15. Scale nibble 3: db = 2*3.5/4.
		binary.LittleEndian.PutUint32(blk[2+4:], 1<<7|3<<28)
		blk[2+1] = 0
		got := decodeOne(t, formats.IQ2_XXS, blk)
		db := float32(2 * 3.5 / 4)
		expectValues(t, formats.IQ2_XXS, got, map[int]float32{0: 8 * db, 8: -8 * db, 9: 8 * db, 15: -8 * db, 32: 8 * 0.25})
	})
	t.Run("iq2_xs", func(t *testing.T) {
		blk := make([]byte, 74)
		binary.LittleEndian.PutUint16(blk, one)
		// Sub-block 1, group 2: index 1 (grid 0x...082b: element 0 is 43),
		// sign group 127 (all of the first 7 negative, ksigns[127] = 255).
		binary.LittleEndian.PutUint16(blk[2+2*(4+2):], 1|127<<9)
		blk[66+1] = 0x52 // low nibble 2 (groups 0, 1), high nibble 5 (groups 2, 3)
		got := decodeOne(t, formats.IQ2_XS, blk)
		expectValues(t, formats.IQ2_XS, got, map[int]float32{
			32: 8 * 2.5 / 4, 48: -43 * 5.5 / 4, 49: -8 * 5.5 / 4, 55: -8 * 5.5 / 4,
		})
	})
	t.Run("iq2_s", func(t *testing.T) {
		blk := make([]byte, 82)
		binary.LittleEndian.PutUint16(blk, one)
		// Group 3 of sub-block 0: low index byte 0, qh bits 6..7 = 3 give
		// index 0x300 = 768; signs byte 0x01 flips element 24.
		blk[2+3] = 0
		blk[66] = 3 << 6
		blk[34+3] = 0x01
		got := decodeOne(t, formats.IQ2_S, blk)
		g := iq2sGrid[768]
		expectValues(t, formats.IQ2_S, got, map[int]float32{
			24: -float32(byte(g)) * 0.5 / 4, 25: float32(byte(g>>8)) * 0.5 / 4, 0: 8 * 0.5 / 4,
		})
	})
	t.Run("iq3_xxs", func(t *testing.T) {
		blk := make([]byte, 98)
		binary.LittleEndian.PutUint16(blk, one)
		// Sub-block 0: indices 0 (all 4s) and 255; sign group 0 = 3 (ksigns[3]
		// = 3: elements 0 and 1 negative); scale nibble 1: db = 1.5/2.
		blk[2+1] = 255
		binary.LittleEndian.PutUint32(blk[66:], 3|1<<28)
		got := decodeOne(t, formats.IQ3_XXS, blk)
		g := iq3xxsGrid[255]
		expectValues(t, formats.IQ3_XXS, got, map[int]float32{
			0: -4 * 0.75, 1: -4 * 0.75, 2: 4 * 0.75, 4: float32(byte(g)) * 0.75, 7: float32(byte(g>>24)) * 0.75,
		})
	})
	t.Run("iq3_s", func(t *testing.T) {
		blk := make([]byte, 110)
		binary.LittleEndian.PutUint16(blk, two)
		// Sub-block 1 (scale byte 0, high nibble 2: db = 2*(1+4) = 10),
		// group 0: second index gets its 9th bit from qh[1] bit 1.
		blk[2+8+1] = 7
		blk[66+1] = 1 << 1
		blk[74+4] = 1 << 4 // flips element 4 of the group (first of the second index)
		blk[106] = 2 << 4
		got := decodeOne(t, formats.IQ3_S, blk)
		g := iq3sGrid[256+7]
		expectValues(t, formats.IQ3_S, got, map[int]float32{
			32 + 4: -float32(byte(g)) * 10, 32 + 5: float32(byte(g>>8)) * 10, 0: float32(byte(iq3sGrid[0])) * 2,
		})
	})
	t.Run("iq1_s", func(t *testing.T) {
		blk := make([]byte, 50)
		binary.LittleEndian.PutUint16(blk, one)
		// Sub-block 2: group 1 index = 5 | (qh bits 3..5 = 2) << 8; scale 3
		// (dl = 7); negative delta.
		blk[2+8+1] = 5
		binary.LittleEndian.PutUint16(blk[34+4:], 2<<3|3<<12|0x8000)
		got := decodeOne(t, formats.IQ1_S, blk)
		g := iq1sGrid[5|2<<8]
		expectValues(t, formats.IQ1_S, got, map[int]float32{
			72: 7 * (float32(int8(g)) - 0.125), 79: 7 * (float32(int8(g>>56)) - 0.125),
			0: float32(int8(iq1sGrid[0])) + 0.125,
		})
	})
	t.Run("iq1_m", func(t *testing.T) {
		blk := make([]byte, 56)
		// d = 1.0 (0x3c00) spread over the top nibbles of the four scale words:
		// nibble k of the half sits in bits 12..15 of word k.
		sc := [4]uint16{0x0 << 12, 0x0 << 12, 0xc << 12, 0x3 << 12}
		// Sub-block 1 is in word 0 bits 6..11: low 3 bits 2 (dl1 = 5), next 3 bits 1 (dl2 = 3).
		sc[0] |= (2 | 1<<3) << 6
		for k, w := range sc {
			binary.LittleEndian.PutUint16(blk[48+2*k:], w)
		}
		// Sub-block 1, group 3: qh[3] high nibble = 0b1001: index top bits 1,
		// negative delta.
		blk[4+3] = 9
		blk[32+3] = 0x9 << 4
		got := decodeOne(t, formats.IQ1_M, blk)
		g := iq1sGrid[9|1<<8]
		g0 := iq1sGrid[0]
		expectValues(t, formats.IQ1_M, got, map[int]float32{
			32 + 24: 3 * (float32(int8(g)) - 0.125), 32 + 31: 3 * (float32(int8(g>>56)) - 0.125),
			32: 5 * (float32(int8(g0)) + 0.125), 32 + 8: 5 * (float32(int8(g0)) + 0.125),
			32 + 16: 3 * (float32(int8(g0)) + 0.125),
		})
	})
}

// TestIQGridDecodeOnly checks that the grid types are
// decode-only in Go: quantizing them needs the codecs that package native
// registers.
func TestIQGridDecodeOnly(t *testing.T) {
	for _, typ := range []formats.DType{formats.IQ2_XXS, formats.IQ2_XS, formats.IQ2_S, formats.IQ3_XXS, formats.IQ3_S, formats.IQ1_S, formats.IQ1_M} {
		c, ok := Lookup(typ)
		if !ok || c.Dequantize == nil {
			t.Errorf("%s has no dequantizer", typ)
		}
		if c.Quantize != nil && !c.Native {
			t.Errorf("%s has a Go quantizer; the grid searches are meant to come from ggml", typ)
		}
	}
}

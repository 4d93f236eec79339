package quant

// Dequantizers of ggml's grid-based IQ types: iq1_s, iq1_m, iq2_xxs, iq2_xs,
// iq2_s, iq3_xxs and iq3_s. Each block of 256 elements stores, per group of 8
// (or 4) elements, an index into a fixed lattice of magnitudes (the tables in
// iqgrid_tables.go, generated from ggml-common.h), sign bits, and small
// per-sub-block scales under an f16 super-block scale.
//
// These are decode-only in Go: ggml's quantizers for them are lattice searches
// that sdtool does not reimplement. In a cgo build, package native registers
// ggml's quantizers for the same types; the registry keeps these Go
// dequantizers (see Register).
//
// The float arithmetic follows ggml's dequantize_row_iq* operation by
// operation (same order, float32 throughout, no a*b+c that a compiler could
// fuse), so the output equals ggml's bit for bit. Signs are applied by
// multiplying with ±1 loaded from a table, as ggml does, rather than by
// negation, so that even NaN scales give the same bits. ggml's kmask_iq2xs
// table is just 1<<j, so sign bit j is read with a shift instead.

//go:generate sh -c "CGO_ENABLED=1 CGO_CFLAGS=-I$(go list -m -f '{{.Dir}}' github.com/ollama/ollama)/ml/backend/ggml/ggml/src go run ./internal/gengrid/main.go -o iqgrid_tables.go"

import (
	"encoding/binary"

	"github.com/sdtool/sdtool/formats"
)

// Block sizes in bytes of the grid IQ types (QK_K = 256 elements each).
const (
	iqBlockElems    = 256
	iq2xxsBlockSize = 66
	iq2xsBlockSize  = 74
	iq2sBlockSize   = 82
	iq3xxsBlockSize = 98
	iq3sBlockSize   = 110
	iq1sBlockSize   = 50
	iq1mBlockSize   = 56
)

func init() {
	for _, c := range []struct {
		t   formats.DType
		dec func([]float32, []byte)
	}{
		{formats.IQ2_XXS, dequantizeIQ2XXS},
		{formats.IQ2_XS, dequantizeIQ2XS},
		{formats.IQ2_S, dequantizeIQ2S},
		{formats.IQ3_XXS, dequantizeIQ3XXS},
		{formats.IQ3_S, dequantizeIQ3S},
		{formats.IQ1_S, dequantizeIQ1S},
		{formats.IQ1_M, dequantizeIQ1M},
	} {
		Register(Codec{Type: c.t, Dequantize: c.dec})
	}
}

// iqSign maps a sign bit to the factor ggml multiplies by.
var iqSign = [2]float32{1, -1}

// iqBlocks returns the number of whole blocks in src and checks that dst
// holds their elements; a short dst is a programmer error (the row helpers
// validate sizes), reported by the slice expression's panic.
func iqBlocks(dst []float32, src []byte, blockBytes int) ([]float32, int) {
	nb := len(src) / blockBytes
	return dst[:nb*iqBlockElems], nb
}

// dequantizeIQ2XXS decodes iq2_xxs: d f16, then per 32 elements a uint32 of
// four 8-bit grid indices and a uint32 of four 7-bit sign groups plus a 4-bit
// scale in the top bits.
func dequantizeIQ2XXS(dst []float32, src []byte) {
	dst, nb := iqBlocks(dst, src, iq2xxsBlockSize)
	for i := 0; i < nb; i++ {
		b := src[i*iq2xxsBlockSize : (i+1)*iq2xxsBlockSize]
		y := dst[i*iqBlockElems : (i+1)*iqBlockElems]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		for ib := 0; ib < 8; ib++ {
			q := b[2+8*ib : 10+8*ib]
			aux := binary.LittleEndian.Uint32(q[4:])
			db := d * (0.5 + float32(aux>>28)) * 0.25
			for l := 0; l < 4; l++ {
				g := iq2xxsGrid[q[l]]
				s := ksignsIQ2XS[(aux>>(7*l))&127]
				out := y[32*ib+8*l : 32*ib+8*l+8]
				for j := range out {
					out[j] = db * float32(uint8(g>>(8*j))) * iqSign[(s>>j)&1]
				}
			}
		}
	}
}

// dequantizeIQ2XS decodes iq2_xs: d f16, 32 uint16 of a 9-bit grid index and
// 7 sign bits each, then 8 bytes of two 4-bit scales (one per 16 elements).
func dequantizeIQ2XS(dst []float32, src []byte) {
	dst, nb := iqBlocks(dst, src, iq2xsBlockSize)
	for i := 0; i < nb; i++ {
		b := src[i*iq2xsBlockSize : (i+1)*iq2xsBlockSize]
		y := dst[i*iqBlockElems : (i+1)*iqBlockElems]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		scales := b[66:74]
		for ib := 0; ib < 8; ib++ {
			db := [2]float32{
				d * (0.5 + float32(scales[ib]&0xf)) * 0.25,
				d * (0.5 + float32(scales[ib]>>4)) * 0.25,
			}
			for l := 0; l < 4; l++ {
				q := binary.LittleEndian.Uint16(b[2+2*(4*ib+l):])
				g := iq2xsGrid[q&511]
				s := ksignsIQ2XS[q>>9]
				dl := db[l/2]
				out := y[32*ib+8*l : 32*ib+8*l+8]
				for j := range out {
					out[j] = dl * float32(uint8(g>>(8*j))) * iqSign[(s>>j)&1]
				}
			}
		}
	}
}

// dequantizeIQ2S decodes iq2_s: d f16, 32 low bytes of 10-bit grid indices,
// 32 bytes of 8 sign bits, 8 bytes holding the indices' top 2 bits, and 8
// bytes of two 4-bit scales.
func dequantizeIQ2S(dst []float32, src []byte) {
	dst, nb := iqBlocks(dst, src, iq2sBlockSize)
	for i := 0; i < nb; i++ {
		b := src[i*iq2sBlockSize : (i+1)*iq2sBlockSize]
		y := dst[i*iqBlockElems : (i+1)*iqBlockElems]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		qs, signs, qh, scales := b[2:34], b[34:66], b[66:74], b[74:82]
		for ib := 0; ib < 8; ib++ {
			db := [2]float32{
				d * (0.5 + float32(scales[ib]&0xf)) * 0.25,
				d * (0.5 + float32(scales[ib]>>4)) * 0.25,
			}
			for l := 0; l < 4; l++ {
				idx := uint(qs[4*ib+l]) | (uint(qh[ib])<<(8-2*l))&0x300
				g := iq2sGrid[idx]
				s := signs[4*ib+l]
				dl := db[l/2]
				out := y[32*ib+8*l : 32*ib+8*l+8]
				for j := range out {
					out[j] = dl * float32(uint8(g>>(8*j))) * iqSign[(s>>j)&1]
				}
			}
		}
	}
}

// dequantizeIQ3XXS decodes iq3_xxs: d f16, 64 bytes of 8-bit grid indices
// (4 elements each), then per 32 elements a uint32 of four 7-bit sign groups
// and a 4-bit scale.
func dequantizeIQ3XXS(dst []float32, src []byte) {
	dst, nb := iqBlocks(dst, src, iq3xxsBlockSize)
	for i := 0; i < nb; i++ {
		b := src[i*iq3xxsBlockSize : (i+1)*iq3xxsBlockSize]
		y := dst[i*iqBlockElems : (i+1)*iqBlockElems]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		qs, ss := b[2:66], b[66:98]
		for ib := 0; ib < 8; ib++ {
			aux := binary.LittleEndian.Uint32(ss[4*ib:])
			db := d * (0.5 + float32(aux>>28)) * 0.5
			for l := 0; l < 4; l++ {
				s := ksignsIQ2XS[(aux>>(7*l))&127]
				g1 := iq3xxsGrid[qs[8*ib+2*l]]
				g2 := iq3xxsGrid[qs[8*ib+2*l+1]]
				out := y[32*ib+8*l : 32*ib+8*l+8]
				for j := 0; j < 4; j++ {
					out[j] = db * float32(uint8(g1>>(8*j))) * iqSign[(s>>j)&1]
					out[j+4] = db * float32(uint8(g2>>(8*j))) * iqSign[(s>>(j+4))&1]
				}
			}
		}
	}
}

// dequantizeIQ3S decodes iq3_s: d f16, 64 low bytes of 9-bit grid indices,
// 8 bytes of the indices' top bits, 32 bytes of sign bits and 4 bytes of two
// 4-bit scales (one per 32 elements, as odd multipliers 1+2s).
func dequantizeIQ3S(dst []float32, src []byte) {
	dst, nb := iqBlocks(dst, src, iq3sBlockSize)
	for i := 0; i < nb; i++ {
		b := src[i*iq3sBlockSize : (i+1)*iq3sBlockSize]
		y := dst[i*iqBlockElems : (i+1)*iqBlockElems]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		qs, qh, signs, scales := b[2:66], b[66:74], b[74:106], b[106:110]
		for ib := 0; ib < 8; ib++ {
			sc := scales[ib/2] >> (4 * (ib % 2)) & 0xf
			db := d * float32(1+2*int(sc))
			h := uint(qh[ib])
			for l := 0; l < 4; l++ {
				g1 := iq3sGrid[uint(qs[8*ib+2*l])|(h<<(8-2*l))&256]
				g2 := iq3sGrid[uint(qs[8*ib+2*l+1])|(h<<(7-2*l))&256]
				s := signs[4*ib+l]
				out := y[32*ib+8*l : 32*ib+8*l+8]
				for j := 0; j < 4; j++ {
					out[j] = db * float32(uint8(g1>>(8*j))) * iqSign[(s>>j)&1]
					out[j+4] = db * float32(uint8(g2>>(8*j))) * iqSign[(s>>(j+4))&1]
				}
			}
		}
	}
}

// dequantizeIQ1S decodes iq1_s: d f16, 32 low bytes of 11-bit grid indices,
// then per 32 elements a uint16 of four 3-bit index tops, a 3-bit scale and
// the sign of the ±delta shift.
func dequantizeIQ1S(dst []float32, src []byte) {
	dst, nb := iqBlocks(dst, src, iq1sBlockSize)
	for i := 0; i < nb; i++ {
		b := src[i*iq1sBlockSize : (i+1)*iq1sBlockSize]
		y := dst[i*iqBlockElems : (i+1)*iqBlockElems]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		qs := b[2:34]
		for ib := 0; ib < 8; ib++ {
			qh := uint(binary.LittleEndian.Uint16(b[34+2*ib:]))
			dl := d * float32(2*((qh>>12)&7)+1)
			delta := float32(iq1sDelta)
			if qh&0x8000 != 0 {
				delta = -iq1sDelta
			}
			for l := 0; l < 4; l++ {
				g := iq1sGrid[uint(qs[4*ib+l])|((qh>>(3*l))&7)<<8]
				out := y[32*ib+8*l : 32*ib+8*l+8]
				for j := range out {
					out[j] = dl * (float32(int8(g>>(8*j))) + delta)
				}
			}
		}
	}
}

// dequantizeIQ1M decodes iq1_m: 32 low bytes of 11-bit grid indices, 16
// bytes of 3-bit index tops and delta signs (one nibble per 8 elements), and
// 8 bytes of 3-bit scales (one per 16 elements) whose four top nibbles
// together hold the f16 super-block scale.
func dequantizeIQ1M(dst []float32, src []byte) {
	dst, nb := iqBlocks(dst, src, iq1mBlockSize)
	for i := 0; i < nb; i++ {
		b := src[i*iq1mBlockSize : (i+1)*iq1mBlockSize]
		y := dst[i*iqBlockElems : (i+1)*iqBlockElems]
		qs, qh := b[0:32], b[32:48]
		var sc [4]uint
		for k := range sc {
			sc[k] = uint(binary.LittleEndian.Uint16(b[48+2*k:]))
		}
		d := F16ToF32(uint16(sc[0]>>12 | (sc[1]>>8)&0x00f0 | (sc[2]>>4)&0x0f00 | sc[3]&0xf000))
		for ib := 0; ib < 8; ib++ {
			s := sc[ib/2] >> (6 * (ib % 2))
			dl := [2]float32{d * float32(2*(s&7)+1), d * float32(2*((s>>3)&7)+1)}
			for l := 0; l < 4; l++ {
				// Nibble l of the two qh bytes: 3 index bits, then the delta sign.
				nib := uint(qh[2*ib+l/2]) >> (4 * (l % 2)) & 0xf
				// ggml's dequantize_row_iq1_m shifts by IQ1S_DELTA (equal to IQ1M_DELTA).
				delta := float32(iq1sDelta)
				if nib&8 != 0 {
					delta = -iq1sDelta
				}
				g := iq1sGrid[uint(qs[4*ib+l])|(nib&7)<<8]
				dv := dl[l/2]
				out := y[32*ib+8*l : 32*ib+8*l+8]
				for j := range out {
					out[j] = dv * (float32(int8(g>>(8*j))) + delta)
				}
			}
		}
	}
}

//go:build cgo

package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/native/ggmltest"
)

// iqGridTypes are the grid IQ types whose dequantizers live in iqgrid.go.
var iqGridTypes = []formats.DType{
	formats.IQ2_XXS, formats.IQ2_XS, formats.IQ2_S, formats.IQ3_XXS, formats.IQ3_S, formats.IQ1_S, formats.IQ1_M,
}

// TestIQGridDequantValidBlocks decodes blocks that ggml's own quantizer wrote
// (Gaussian rows with outliers at several magnitudes, with ones and random
// importance vectors, and without one where ggml allows it) and requires
// ggml's float bits exactly.
func TestIQGridDequantValidBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("ggml's grid search tables take tens of CPU seconds to build")
	}
	const n, rows = 512, 6
	r := rand.New(rand.NewPCG(harnessSeed, 0x1901))
	src := make([]float32, n*rows)
	for row := range rows {
		gaussRow(r, src[row*n:(row+1)*n])
		scale := float32(math.Pow(10, float64(row-3))) // 1e-3 .. 1e2
		for i := row * n; i < (row+1)*n; i++ {
			src[i] *= scale
		}
	}
	types := iqGridTypes
	if !longtest.Enabled() {
		// ggml's search tables for the larger grids take tens of CPU seconds
		// to build in the plain build; the 256-point grids stand for them.
		types = []formats.DType{formats.IQ2_XXS, formats.IQ3_XXS}
	}
	for _, typ := range types {
		for _, ws := range testWeights(harnessSeed, n) {
			if ws.vec == nil && native.RequiresImatrix(typ) {
				continue
			}
			if ws.name == "zeros" {
				// A 32-element group with all weights zero aborts some of
				// ggml's grid searches; the native codecs guard against that.
				continue
			}
			t.Run(typ.String()+"/"+ws.name, func(t *testing.T) {
				q, err := ggmltest.QuantizeChunk(typ, src, n, ws.vec)
				if err != nil {
					t.Fatal(err)
				}
				compareIQDequant(t, typ, q, false)
			})
		}
	}
}

// TestIQGridDequantGarbage decodes random block bytes whose f16 scales are
// finite and moderate, so every grid index, sign pattern and sub-scale
// occurs; the float bits must equal ggml's exactly. Blocks with arbitrary
// (possibly NaN or Inf) scales are covered by checkDequantRandom.
func TestIQGridDequantGarbage(t *testing.T) {
	for _, typ := range iqGridTypes {
		t.Run(typ.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(harnessSeed, uint64(typ)<<8|1))
			bb := typ.Info().BlockBytes
			const blocks = 1024
			src := make([]byte, blocks*bb)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			for b := range blocks {
				blk := src[b*bb : (b+1)*bb]
				// A finite half: exponent field 1..30 (normal) or a subnormal.
				h := uint16(r.Uint32()) & 0x83ff
				if b%16 != 0 {
					h |= uint16(1+r.IntN(30)) << 10
				}
				if typ == formats.IQ1_M {
					// The scale is spread over the top nibbles of the four
					// uint16 sub-scale words at the end of the block.
					for k := range 4 {
						w := binary.LittleEndian.Uint16(blk[48+2*k:])
						w = w&0x0fff | (h>>(4*k)&0xf)<<12
						binary.LittleEndian.PutUint16(blk[48+2*k:], w)
					}
				} else {
					binary.LittleEndian.PutUint16(blk, h)
				}
			}
			compareIQDequant(t, typ, src, false)
			checkDequantRandom(t, typ)
		})
	}
}

// compareIQDequant decodes src with the Go dequantizer and with ggml and
// fails on the first element whose float bits differ.
func compareIQDequant(t *testing.T, typ formats.DType, src []byte, nanEqual bool) {
	t.Helper()
	info := typ.Info()
	n := len(src) / info.BlockBytes * info.BlockSize
	got := make([]float32, n)
	if err := DequantizeRows(typ, got, src, 2); err != nil {
		t.Fatal(err)
	}
	want, err := ggmltest.Dequantize(typ, src, n)
	if err != nil {
		t.Fatal(err)
	}
	nonzero := 0
	for i := range got {
		g, w := got[i], want[i]
		if w != 0 {
			nonzero++
		}
		if math.Float32bits(g) == math.Float32bits(w) || nanEqual && g != g && w != w {
			continue
		}
		b := i / info.BlockSize
		t.Fatalf("%s element %d (block %d: % x): got %g (%#08x), ggml %g (%#08x)", typ, i, b,
			src[b*info.BlockBytes:(b+1)*info.BlockBytes], g, math.Float32bits(g), w, math.Float32bits(w))
	}
	if nonzero < n/2 {
		t.Fatalf("%s: only %d of %d decoded values are nonzero; the test data is degenerate", typ, nonzero, n)
	}
}

// FuzzIQGridDequant decodes arbitrary bytes as every grid type and compares
// with ggml (NaN matching any NaN): the decoders must neither panic nor
// differ on any input.
func FuzzIQGridDequant(f *testing.F) {
	f.Add(make([]byte, 110))
	f.Add([]byte("\x00\x3c" + string(make([]byte, 120))))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Four blocks of the widest grid type cover every path; longer
		// inputs only slow each run and the minimisations (capped for that
		// reason, as FuzzQuantize is).
		if len(data) > 4*128 {
			return
		}
		for _, typ := range iqGridTypes {
			bb := typ.Info().BlockBytes
			src := data[:len(data)/bb*bb]
			if len(src) == 0 {
				continue
			}
			n := len(src) / bb * 256
			got := make([]float32, n)
			if err := DequantizeRows(typ, got, src, 1); err != nil {
				t.Fatal(err)
			}
			want, err := ggmltest.Dequantize(typ, src, n)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if g, w := got[i], want[i]; math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					t.Fatalf("%s element %d: got %g, ggml %g", typ, i, g, w)
				}
			}
		}
	})
}

// BenchmarkDequantizeIQGrid decodes 64 blocks of each grid type with the Go
// dequantizer and with ggml's to_float, single-threaded; MB/s counts the
// float32 output.
func BenchmarkDequantizeIQGrid(b *testing.B) {
	const blocks = 64
	for _, typ := range iqGridTypes {
		bb := typ.Info().BlockBytes
		r := rand.New(rand.NewPCG(1, uint64(typ)))
		src := make([]byte, blocks*bb)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		for k := range blocks {
			binary.LittleEndian.PutUint16(src[k*bb:], 0x3c00)
		}
		dst := make([]float32, blocks*256)
		c, _ := Lookup(typ)
		b.Run(typ.String()+"/go", func(b *testing.B) {
			b.SetBytes(int64(4 * len(dst)))
			for b.Loop() {
				c.Dequantize(dst, src)
			}
		})
		b.Run(typ.String()+"/ggml", func(b *testing.B) {
			b.SetBytes(int64(4 * len(dst)))
			for b.Loop() {
				if _, err := ggmltest.Dequantize(typ, src, len(dst)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

//go:build cgo

package quant

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native/ggmltest"
)

// checkAgainstGGML compares the Go codec of typ with the linked ggml on every
// shared row set and importance vector: the quantized bytes must equal
// ggml_quantize_chunk's byte for byte, and our dequantizer must give the same
// float bits as ggml's to_float on ggml's bytes.
func checkAgainstGGML(t *testing.T, typ formats.DType) {
	t.Helper()
	c, err := Encoder(typ)
	if err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
	if c.Native {
		t.Fatalf("%s: the registered quantizer is ggml itself; there is nothing to compare", typ)
	}
	info := typ.Info()
	for _, rs := range testRowSets(harnessSeed, info.BlockSize) {
		for _, ws := range testWeights(harnessSeed, rs.nPerRow) {
			if ws.vec == nil && c.NeedsWeights {
				continue
			}
			t.Run(rs.name+"/"+ws.name, func(t *testing.T) {
				compareWithGGML(t, typ, rs, ws)
			})
		}
	}
}

func compareWithGGML(t *testing.T, typ formats.DType, rs rowSet, ws weightSet) {
	want, err := ggmltest.QuantizeChunk(typ, rs.data, rs.nPerRow, ws.vec)
	if err != nil {
		t.Fatalf("ggml: %v", err)
	}
	checkModesAgainst(t, typ, rs, ws, want)
	gotF := make([]float32, len(rs.data))
	if err := DequantizeRows(typ, gotF, want, 1); err != nil {
		t.Fatal(err)
	}
	var wantF []float32
	if typ == formats.F32 {
		// ggml has no to_float for f32: its rows are used as they are.
		wantF = rs.data
	} else if wantF, err = ggmltest.Dequantize(typ, want, len(rs.data)); err != nil {
		t.Fatalf("ggml: %v", err)
	}
	if i := firstDiffBits(gotF, wantF); i >= 0 {
		t.Errorf("dequantize element %d: got %g (%#08x), ggml %g (%#08x)",
			i, gotF[i], math.Float32bits(gotF[i]), wantF[i], math.Float32bits(wantF[i]))
	}
}

// checkModesAgainst quantizes rs under ws in every kernel mode and compares
// the bytes with ggml's (want).
func checkModesAgainst(t *testing.T, typ formats.DType, rs rowSet, ws weightSet, want []byte) {
	t.Helper()
	for _, m := range kernelModes() {
		got := make([]byte, len(want))
		var err error
		withKernels(m.flags, func() { err = QuantizeRows(typ, got, rs.data, rs.nPerRow, ws.vec, 1) })
		if err != nil {
			t.Fatalf("%s kernels: %v", m.name, err)
		}
		if i := firstDiffBlock(got, want, typ.Info().BlockBytes); i >= 0 {
			t.Logf("with the %s kernels:", m.name)
			reportBlock(t, typ, rs, ws, got, want, i)
		}
	}
}

// firstDiffBlock returns the index of the first block of bb bytes in which a
// and b differ, or -1.
func firstDiffBlock(a, b []byte, bb int) int {
	if len(a) != len(b) {
		return 0
	}
	for i := 0; i < len(a); i += bb {
		if !bytes.Equal(a[i:i+bb], b[i:i+bb]) {
			return i / bb
		}
	}
	return -1
}

// firstDiffBits returns the first index where the float bits differ, or -1.
func firstDiffBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// reportBlock fails t with the first differing block: where it is, both
// encodings, the input values and the weights that went into it.
func reportBlock(t *testing.T, typ formats.DType, rs rowSet, ws weightSet, got, want []byte, blk int) {
	t.Helper()
	info := typ.Info()
	bs, bb := info.BlockSize, info.BlockBytes
	perRow := rs.nPerRow / bs
	row, col := blk/perRow, blk%perRow*bs
	differ := 0
	for i := 0; i < len(got); i += bb {
		if !bytes.Equal(got[i:i+bb], want[i:i+bb]) {
			differ++
		}
	}
	msg := fmt.Sprintf("%s %s/%s: %d of %d blocks differ; first is block %d (row %d, elements %d..%d)\n go:   % x\n ggml: % x\n x: %v",
		typ, rs.name, ws.name, differ, len(got)/bb, blk, row, col, col+bs,
		got[blk*bb:(blk+1)*bb], want[blk*bb:(blk+1)*bb], rs.data[row*rs.nPerRow+col:row*rs.nPerRow+col+bs])
	if ws.vec != nil {
		msg += fmt.Sprintf("\n w: %v", ws.vec[col:col+bs])
	}
	t.Error(msg)
}

// checkDequantRandom decodes random blocks of typ with our dequantizer and
// ggml's and requires the same float bits (any NaN matches any NaN, since
// payloads of NaN scales are not part of any format). It covers types that
// ggml cannot quantize (q8_1, q8_K) and block bytes no quantizer produces.
func checkDequantRandom(t *testing.T, typ formats.DType) {
	t.Helper()
	if _, err := Decoder(typ); err != nil {
		t.Fatal(err)
	}
	info := typ.Info()
	r := rand.New(rand.NewPCG(harnessSeed, uint64(typ)))
	const blocks = 512
	src := make([]byte, blocks*info.BlockBytes)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	n := blocks * info.BlockSize
	got := make([]float32, n)
	if err := DequantizeRows(typ, got, src, 1); err != nil {
		t.Fatal(err)
	}
	want, err := ggmltest.Dequantize(typ, src, n)
	if err != nil {
		t.Fatalf("ggml: %v", err)
	}
	for i := range got {
		g, w := got[i], want[i]
		if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			b := i / info.BlockSize
			t.Fatalf("%s element %d (block %d: % x): got %g (%#08x), ggml %g (%#08x)", typ, i, b,
				src[b*info.BlockBytes:(b+1)*info.BlockBytes], g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
}

// checkSpecialsAgainstGGML is checkAgainstGGML on rows with NaN and ±Inf,
// for codecs whose ggml counterpart survives such input: it pins down that
// our output is exactly what ggml's arithmetic gives. Dequantized NaNs
// must be NaN on both sides (payloads are not compared).
func checkSpecialsAgainstGGML(t *testing.T, typ formats.DType) {
	t.Helper()
	c, err := Encoder(typ)
	if err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
	for _, rs := range testSpecialRowSets(harnessSeed, typ.Info().BlockSize) {
		for _, ws := range testWeights(harnessSeed, rs.nPerRow) {
			if ws.vec == nil && c.NeedsWeights {
				continue
			}
			t.Run(rs.name+"/"+ws.name, func(t *testing.T) {
				want, err := ggmltest.QuantizeChunk(typ, rs.data, rs.nPerRow, ws.vec)
				if err != nil {
					t.Fatalf("ggml: %v", err)
				}
				checkModesAgainst(t, typ, rs, ws, want)
				gotF := make([]float32, len(rs.data))
				if err := DequantizeRows(typ, gotF, want, 1); err != nil {
					t.Fatal(err)
				}
				wantF := rs.data
				if typ != formats.F32 {
					if wantF, err = ggmltest.Dequantize(typ, want, len(rs.data)); err != nil {
						t.Fatalf("ggml: %v", err)
					}
				}
				for i := range gotF {
					g, w := gotF[i], wantF[i]
					if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
						t.Fatalf("dequantize element %d: got %g, ggml %g", i, g, w)
					}
				}
			})
		}
	}
}

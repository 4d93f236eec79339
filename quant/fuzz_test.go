package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// fuzzTypes are the codecs of this file set that the fuzz targets drive.
var fuzzTypes = []formats.DType{formats.F32, formats.F16, formats.BF16, formats.Q4_0, formats.Q4_1,
	formats.Q5_0, formats.Q5_1, formats.Q8_0, formats.IQ4_NL, formats.MXFP4, formats.TQ1_0, formats.TQ2_0}

// fuzzCompare is set by fuzz_cgo_test.go to compare an encoding with ggml's.
var fuzzCompare func(t *testing.T, typ formats.DType, src []float32, nPerRow int, weights []float32, got []byte)

// FuzzQuantize reads float32 bit patterns (every NaN, Inf and subnormal
// included) and quantizes them with each codec, with and without weights:
// it must never fail, must not depend on the worker count, and in a cgo
// build must give ggml's bytes.
func FuzzQuantize(f *testing.F) {
	seed := make([]byte, 4*256)
	for i := range 256 {
		binary.LittleEndian.PutUint32(seed[4*i:], math.Float32bits(float32(i%17)-8))
	}
	f.Add(seed, uint8(0), false)
	nanBlock := bytes.Repeat([]byte{0, 0, 0xc0, 0x7f}, 256)
	f.Add(nanBlock, uint8(3), true)
	f.Fuzz(func(t *testing.T, data []byte, which uint8, weighted bool) {
		// Four 256-element blocks reach every path of a row codec; longer
		// inputs only make each run (and the minimisation of every new
		// input, with ggml's encoder run beside ours) slower: uncapped,
		// the target stalled minutes at a time.
		if len(data) > 4*4*256 {
			return
		}
		typ := fuzzTypes[int(which)%len(fuzzTypes)]
		bs := max(typ.Info().BlockSize, 1)
		n := len(data) / 4 / bs * bs
		if n == 0 {
			return
		}
		src := make([]float32, n)
		for i := range src {
			src[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		var weights []float32
		if weighted {
			weights = make([]float32, n)
			for i := range weights {
				// Importance values are non-negative sums of squares.
				weights[i] = cFabs(src[(i*7+3)%n])
			}
		}
		rb, _ := typ.RowBytes(int64(n))
		got := make([]byte, rb)
		if err := QuantizeRows(typ, got, src, n, weights, 1); err != nil {
			t.Fatal(err)
		}
		back := make([]float32, n)
		if err := DequantizeRows(typ, back, got, 1); err != nil {
			t.Fatal(err)
		}
		if fuzzCompare != nil {
			fuzzCompare(t, typ, src, n, weights, got)
		}
	})
}

// FuzzDequantize decodes arbitrary bytes as each block type and float
// dtype: it must never fail on a whole number of blocks, and the result
// must not depend on the worker count.
func FuzzDequantize(f *testing.F) {
	f.Add(bytes.Repeat([]byte{0xff, 0x7c, 0x12}, 100), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		types := append(fuzzTypes, formats.Q8_1, formats.Q8_K, formats.F8_E4M3, formats.F8_E5M2,
			formats.F8_E4M3FNUZ, formats.F8_E5M2FNUZ, formats.F8_E8M0, formats.F4, formats.I8, formats.I16,
			formats.I32, formats.I64, formats.U8, formats.U16, formats.U32, formats.U64, formats.Bool, formats.F64)
		typ := types[int(which)%len(types)]
		info := typ.Info()
		nb := len(data) / info.BlockBytes
		src := data[:nb*info.BlockBytes]
		a := make([]float32, nb*info.BlockSize)
		if err := DecodeFloats(typ, a, src); err != nil {
			t.Fatal(err)
		}
		b := make([]float32, len(a))
		if err := DequantizeRows(typ, b, src, 3); err != nil {
			t.Fatal(err)
		}
		if i := firstDiffBitsNaN(a, b); i >= 0 {
			t.Fatalf("%s: element %d differs between 1 and 3 workers", typ, i)
		}
	})
}

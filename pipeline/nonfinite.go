package pipeline

import (
	"encoding/binary"
	"math"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// scanFloats is how many values a quantized chunk is decoded in at a time
// to count its non-finite values: scratch stays small whatever the chunk.
const scanFloats = 64 << 10

// scans reports whether the engine counts the non-finite values of out's
// chunks: not when its producer counts its own Damage, nor for a byte copy
// of a block type, whose decode would cost more than the copy (several
// times a float scan) for values the input already held.
func scans(out *Output) bool {
	if _, counted := out.Producer.(Damaged); counted {
		return false
	}
	_, copied := out.Producer.(*copyProducer)
	return !copied || !out.Type.Quantized()
}

// countNonFinite counts the NaN and infinite values in b, bytes of type t
// as written: float types by their bits, block types decoded a piece at a
// time (in scratch slot 0, which producers do not keep), integer types
// never. A type without a decoder counts nothing.
func countNonFinite(t formats.DType, b []byte, s *tensor.Scratch) int64 {
	var n int64
	switch t {
	case formats.F32:
		for i := 0; i+4 <= len(b); i += 4 {
			if binary.LittleEndian.Uint32(b[i:])&0x7f800000 == 0x7f800000 {
				n++
			}
		}
	case formats.F16:
		for i := 0; i+2 <= len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:])&0x7c00 == 0x7c00 {
				n++
			}
		}
	case formats.BF16:
		for i := 0; i+2 <= len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:])&0x7f80 == 0x7f80 {
				n++
			}
		}
	case formats.F64:
		for i := 0; i+8 <= len(b); i += 8 {
			if binary.LittleEndian.Uint64(b[i:])&0x7ff0000000000000 == 0x7ff0000000000000 {
				n++
			}
		}
	case formats.F8_E4M3: // no infinities; NaN is S.1111.111
		for _, v := range b {
			if v&0x7f == 0x7f {
				n++
			}
		}
	case formats.F8_E5M2:
		for _, v := range b {
			if v&0x7c == 0x7c {
				n++
			}
		}
	case formats.F8_E4M3FNUZ, formats.F8_E5M2FNUZ: // the one NaN is negative zero's code
		for _, v := range b {
			if v == 0x80 {
				n++
			}
		}
	default:
		if t.Quantized() {
			n = decodeNonFinite(t, b, s)
		}
	}
	return n
}

// decodeNonFinite counts the non-finite values of a block type's bytes by
// decoding them scanFloats at a time.
func decodeNonFinite(t formats.DType, b []byte, s *tensor.Scratch) int64 {
	info := t.Info()
	if info.BlockSize <= 0 || info.BlockBytes <= 0 {
		return 0
	}
	blocks := max(scanFloats/info.BlockSize, 1)
	var n int64
	for len(b) >= info.BlockBytes {
		k := min(blocks, len(b)/info.BlockBytes)
		f := s.Float32s(0, k*info.BlockSize)
		if quant.DecodeFloats(t, f, b[:k*info.BlockBytes]) != nil {
			return n
		}
		for _, v := range f {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				n++
			}
		}
		b = b[k*info.BlockBytes:]
	}
	return n
}

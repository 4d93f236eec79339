package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

// The element-wise codecs: ggml's float types (f32, f16, bf16, as
// ggml_quantize_chunk writes them), the safetensors float and integer dtypes
// (decode only, except the two FP8 types ComfyUI writes), all little-endian.

func init() {
	Register(Codec{Type: formats.F32, Quantize: quantizeF32, Dequantize: dequantizeF32})
	Register(Codec{Type: formats.F16, Quantize: func(dst []byte, src []float32, _ []float32) { F32ToF16Row(dst, src) },
		Dequantize: func(dst []float32, src []byte) { F16ToF32Row(dst, src) }})
	Register(Codec{Type: formats.BF16, Quantize: func(dst []byte, src []float32, _ []float32) { F32ToBF16Row(dst, src) },
		Dequantize: func(dst []float32, src []byte) { BF16ToF32Row(dst, src) }})
	Register(Codec{Type: formats.F8_E4M3, Quantize: quantizeF8E4M3, Dequantize: tableDecoder(&e4m3Table)})
	Register(Codec{Type: formats.F8_E5M2, Quantize: quantizeF8E5M2, Dequantize: tableDecoder(&e5m2Table)})
	Register(Codec{Type: formats.F8_E4M3FNUZ, Dequantize: tableDecoder(&e4m3fnuzTable)})
	Register(Codec{Type: formats.F8_E5M2FNUZ, Dequantize: tableDecoder(&e5m2fnuzTable)})
	Register(Codec{Type: formats.F8_E8M0, Dequantize: tableDecoder(&e8m0Table)})
	Register(Codec{Type: formats.F4, Dequantize: dequantizeF4})
	Register(Codec{Type: formats.F64, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			// float32(float64) rounds to nearest even; NaN stays NaN.
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
	}})
	Register(Codec{Type: formats.I8, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			dst[i] = float32(int8(src[i]))
		}
	}})
	Register(Codec{Type: formats.U8, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			dst[i] = float32(src[i])
		}
	}})
	Register(Codec{Type: formats.Bool, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			// Any non-zero byte is true, as numpy and torch read bools.
			dst[i] = 0
			if src[i] != 0 {
				dst[i] = 1
			}
		}
	}})
	Register(Codec{Type: formats.I16, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			dst[i] = float32(int16(binary.LittleEndian.Uint16(src[2*i:])))
		}
	}})
	Register(Codec{Type: formats.U16, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			dst[i] = float32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	}})
	// Integers wider than 24 bits round to the nearest float32 (ties to even).
	Register(Codec{Type: formats.I32, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			dst[i] = float32(int32(binary.LittleEndian.Uint32(src[4*i:])))
		}
	}})
	Register(Codec{Type: formats.U32, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			dst[i] = float32(binary.LittleEndian.Uint32(src[4*i:]))
		}
	}})
	Register(Codec{Type: formats.I64, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			dst[i] = float32(int64(binary.LittleEndian.Uint64(src[8*i:])))
		}
	}})
	Register(Codec{Type: formats.U64, Dequantize: func(dst []float32, src []byte) {
		for i := range dst {
			dst[i] = float32(binary.LittleEndian.Uint64(src[8*i:]))
		}
	}})
}

// DecodeFloats decodes src, stored as type t, into dst: every float and
// integer dtype (f32, f16, bf16, f64, the F8 and F4 dtypes, i8..i64, u8..u64,
// bool) and every block type with a registered dequantizer. len(dst) must be
// the element count and len(src) exactly its storage size. The F6 dtypes
// are refused: safetensors does not define how their 6-bit values are packed.
func DecodeFloats(t formats.DType, dst []float32, src []byte) error {
	if t == formats.F6_E2M3 || t == formats.F6_E3M2 {
		return fmt.Errorf("cannot decode %s: the bit packing of 6-bit floats is not defined (%w)", t, ErrNoCodec)
	}
	return DequantizeRows(t, dst, src, 1)
}

// littleEndian reports a little-endian machine, where a float32 slice in
// memory already is its little-endian encoding.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floatBytes is the memory of f as bytes.
func floatBytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

func quantizeF32(dst []byte, src []float32, _ []float32) {
	dst = dst[:4*len(src)]
	if littleEndian {
		copyBytes(dst, floatBytes(src))
		return
	}
	for i, f := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
}

func dequantizeF32(dst []float32, src []byte) {
	src = src[:4*len(dst)]
	if littleEndian {
		copy(floatBytes(dst), src)
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func quantizeF8E4M3(dst []byte, src []float32, _ []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = F32ToF8E4M3(f)
	}
}

func quantizeF8E5M2(dst []byte, src []float32, _ []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = F32ToF8E5M2(f)
	}
}

// tableDecoder returns a decoder of one byte per element through tab.
func tableDecoder(tab *[256]float32) func(dst []float32, src []byte) {
	return func(dst []float32, src []byte) {
		src = src[:len(dst)]
		for i, b := range src {
			dst[i] = tab[b]
		}
	}
}

func dequantizeF4(dst []float32, src []byte) {
	src = src[:len(dst)/2]
	dst = dst[:2*len(src)]
	for i, b := range src {
		dst[2*i] = f4Table[b&15]
		dst[2*i+1] = f4Table[b>>4]
	}
}

package quant_test

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// Quantize two rows of 32 to q8_0 with two workers and decode them again.
func ExampleQuantizeRows() {
	const nPerRow = 32
	src := make([]float32, 2*nPerRow)
	for i := range src {
		src[i] = float32(i%16) - 7.5
	}
	rowBytes, _ := formats.Q8_0.RowBytes(nPerRow)
	dst := make([]byte, 2*rowBytes)
	if err := quant.QuantizeRows(formats.Q8_0, dst, src, nPerRow, nil, 2); err != nil {
		fmt.Println(err)
		return
	}
	back := make([]float32, len(src))
	if err := quant.DequantizeRows(formats.Q8_0, back, dst, 2); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(dst), back[0], back[15], back[40])
	// Output: 68 -7.499542 7.499542 0.4724121
}

// Decode safetensors F8_E4M3 bytes to float32.
func ExampleDecodeFloats() {
	src := []byte{0x38, 0xb8, 0x7e, 0x01}
	dst := make([]float32, len(src))
	if err := quant.DecodeFloats(formats.F8_E4M3, dst, src); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(dst)
	// Output: [1 -1 448 0.001953125]
}

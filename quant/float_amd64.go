//go:build amd64 && !purego

package quant

// f16RowAVX2 and bf16RowAVX2 are F32ToF16Row and F32ToBF16Row for n
// elements, n a multiple of 16.
//
//go:noescape
func f16RowAVX2(dst *byte, src *float32, n int)

//go:noescape
func bf16RowAVX2(dst *byte, src *float32, n int)

// f16Rows encodes the longest multiple of 16 elements of src (dst holds
// 2·len(src) bytes) and returns how many it encoded.
func f16Rows(dst []byte, src []float32) int {
	n := len(src) &^ 15
	if !simd.floats || n == 0 || len(dst) < 2*n {
		return 0
	}
	f16RowAVX2(&dst[0], &src[0], n)
	return n
}

// bf16Rows is f16Rows for bfloat16.
func bf16Rows(dst []byte, src []float32) int {
	n := len(src) &^ 15
	if !simd.floats || n == 0 || len(dst) < 2*n {
		return 0
	}
	bf16RowAVX2(&dst[0], &src[0], n)
	return n
}

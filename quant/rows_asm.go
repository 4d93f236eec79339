//go:build (amd64 || arm64) && !purego

package quant

// The row kernels (legacy_amd64.s with AVX2; kernels_arm64.s with NEON)
// encode whole blocks of src into dst until the first block that needs the
// scalar code (NaN, Inf, an extreme of ±0, a scale whose inverse
// overflows), and return how many they encoded. The float row kernels
// convert n elements, n a multiple of 16.

//go:noescape
func q8_0RowsVec(dst *byte, src *float32, nb int) int

//go:noescape
func q4_0RowsVec(dst *byte, src *float32, nb int) int

//go:noescape
func q5_0RowsVec(dst *byte, src *float32, nb int) int

//go:noescape
func q4_1RowsVec(dst *byte, src *float32, nb int) int

//go:noescape
func q5_1RowsVec(dst *byte, src *float32, nb int) int

//go:noescape
func f16RowVec(dst *byte, src *float32, n int)

//go:noescape
func bf16RowVec(dst *byte, src *float32, n int)

//go:noescape
func f16DecodeRowVec(dst *float32, src *byte, n int)

// legacyRows runs a row kernel on nb blocks of src and returns how many it
// encoded.
func legacyRows(kernel func(*byte, *float32, int) int, dst []byte, src []float32, nb, blockBytes int) int {
	if !haveVector || nb <= 0 || len(src) < 32*nb || len(dst) < blockBytes*nb {
		return 0
	}
	return kernel(&dst[0], &src[0], nb)
}

func rowsQ8_0(dst []byte, src []float32, nb int) int {
	return legacyRows(q8_0RowsVec, dst, src, nb, q8_0Bytes)
}
func rowsQ4_0(dst []byte, src []float32, nb int) int {
	return legacyRows(q4_0RowsVec, dst, src, nb, q4_0Bytes)
}
func rowsQ5_0(dst []byte, src []float32, nb int) int {
	return legacyRows(q5_0RowsVec, dst, src, nb, q5_0Bytes)
}
func rowsQ4_1(dst []byte, src []float32, nb int) int {
	return legacyRows(q4_1RowsVec, dst, src, nb, q4_1Bytes)
}
func rowsQ5_1(dst []byte, src []float32, nb int) int {
	return legacyRows(q5_1RowsVec, dst, src, nb, q5_1Bytes)
}

// f16Rows encodes the longest multiple of 16 elements of src (dst holds
// 2·len(src) bytes) and returns how many it encoded.
func f16Rows(dst []byte, src []float32) int {
	n := len(src) &^ 15
	if !haveVector || !simd.floats || n == 0 || len(dst) < 2*n {
		return 0
	}
	f16RowVec(&dst[0], &src[0], n)
	return n
}

// bf16Rows is f16Rows for bfloat16.
func bf16Rows(dst []byte, src []float32) int {
	n := len(src) &^ 15
	if !haveVector || !simd.floats || n == 0 || len(dst) < 2*n {
		return 0
	}
	bf16RowVec(&dst[0], &src[0], n)
	return n
}

// f16Decode decodes the longest multiple of 16 halves of src into dst
// (which holds len(src)/2 floats) and returns how many it decoded.
func f16Decode(dst []float32, src []byte) int {
	n := len(dst) &^ 15
	if !haveVector || !simd.floats || n == 0 || len(src) < 2*n {
		return 0
	}
	f16DecodeRowVec(&dst[0], &src[0], n)
	return n
}

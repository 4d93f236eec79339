//go:build amd64 && !purego

package quant

// The row kernels of legacy_amd64.s encode blocks of src into dst until
// the first block that needs the scalar code, and return how many they
// encoded.

//go:noescape
func q8_0RowsAVX2(dst *byte, src *float32, nb int) int

//go:noescape
func q4_0RowsAVX2(dst *byte, src *float32, nb int) int

//go:noescape
func q5_0RowsAVX2(dst *byte, src *float32, nb int) int

//go:noescape
func q4_1RowsAVX2(dst *byte, src *float32, nb int) int

//go:noescape
func q5_1RowsAVX2(dst *byte, src *float32, nb int) int

// legacyRows encodes whole blocks of src (nb of them) as type t with the
// row kernels and returns how many it encoded before the first block they
// leave to the scalar code.
func legacyRows(kernel func(*byte, *float32, int) int, dst []byte, src []float32, nb, blockBytes int) int {
	if !haveAVX2 || nb <= 0 || len(src) < 32*nb || len(dst) < blockBytes*nb {
		return 0
	}
	return kernel(&dst[0], &src[0], nb)
}

func rowsQ8_0(dst []byte, src []float32, nb int) int {
	return legacyRows(q8_0RowsAVX2, dst, src, nb, q8_0Bytes)
}
func rowsQ4_0(dst []byte, src []float32, nb int) int {
	return legacyRows(q4_0RowsAVX2, dst, src, nb, q4_0Bytes)
}
func rowsQ5_0(dst []byte, src []float32, nb int) int {
	return legacyRows(q5_0RowsAVX2, dst, src, nb, q5_0Bytes)
}
func rowsQ4_1(dst []byte, src []float32, nb int) int {
	return legacyRows(q4_1RowsAVX2, dst, src, nb, q4_1Bytes)
}
func rowsQ5_1(dst []byte, src []float32, nb int) int {
	return legacyRows(q5_1RowsAVX2, dst, src, nb, q5_1Bytes)
}

//go:build (!amd64 && !arm64) || purego

package quant

// Without assembly the legacy row kernels encode nothing, leaving every
// block to the scalar code.
func rowsQ8_0(dst []byte, src []float32, nb int) int { return 0 }
func rowsQ4_0(dst []byte, src []float32, nb int) int { return 0 }
func rowsQ5_0(dst []byte, src []float32, nb int) int { return 0 }
func rowsQ4_1(dst []byte, src []float32, nb int) int { return 0 }
func rowsQ5_1(dst []byte, src []float32, nb int) int { return 0 }

// Without assembly the float rows are converted by the scalar code.
func f16Rows(dst []byte, src []float32) int   { return 0 }
func bf16Rows(dst []byte, src []float32) int  { return 0 }
func f16Decode(dst []float32, src []byte) int { return 0 }

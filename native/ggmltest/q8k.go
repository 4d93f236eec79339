//go:build cgo

package ggmltest

/*
#include <stdint.h>
void dequantize_row_q8_K(const void * x, float * y, int64_t k);
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

// DequantizeQ8K decodes n elements of q8_K with ggml's dequantize_row_q8_K,
// which ggml's type traits do not expose as q8_K's to_float.
func DequantizeQ8K(src []byte, n int) ([]float32, error) {
	need, err := formats.Q8_K.RowBytes(int64(n))
	if err != nil {
		return nil, fmt.Errorf("ggml: %v", err)
	}
	if int64(len(src)) < need {
		return nil, fmt.Errorf("ggml: %d bytes for %d elements of q8_K, want %d", len(src), n, need)
	}
	dst := make([]float32, n)
	if n > 0 {
		C.dequantize_row_q8_K(unsafe.Pointer(&src[0]), (*C.float)(unsafe.Pointer(&dst[0])), C.int64_t(n))
	}
	return dst, nil
}

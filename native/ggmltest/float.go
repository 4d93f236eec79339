//go:build cgo

package ggmltest

/*
#include <stdint.h>
typedef struct { uint16_t bits; } sdt_bf16_t;
void ggml_fp32_to_fp16_row(const float * x, uint16_t * y, int64_t n);
void ggml_fp16_to_fp32_row(const uint16_t * x, float * y, int64_t n);
void ggml_fp32_to_bf16_row_ref(const float * x, sdt_bf16_t * y, int64_t n);
void ggml_bf16_to_fp32_row(const sdt_bf16_t * x, float * y, int64_t n);
*/
import "C"

import "unsafe"

// FP32ToFP16Row converts floats to IEEE halves with ggml_fp32_to_fp16_row.
func FP32ToFP16Row(src []float32) []uint16 {
	dst := make([]uint16, len(src))
	if len(src) > 0 {
		C.ggml_fp32_to_fp16_row((*C.float)(unsafe.Pointer(&src[0])), (*C.uint16_t)(unsafe.Pointer(&dst[0])), C.int64_t(len(src)))
	}
	return dst
}

// FP16ToFP32Row widens IEEE halves to floats with ggml_fp16_to_fp32_row.
func FP16ToFP32Row(src []uint16) []float32 {
	dst := make([]float32, len(src))
	if len(src) > 0 {
		C.ggml_fp16_to_fp32_row((*C.uint16_t)(unsafe.Pointer(&src[0])), (*C.float)(unsafe.Pointer(&dst[0])), C.int64_t(len(src)))
	}
	return dst
}

// FP32ToBF16RowRef converts floats to bfloat16 with ggml_fp32_to_bf16_row_ref.
func FP32ToBF16RowRef(src []float32) []uint16 {
	dst := make([]uint16, len(src))
	if len(src) > 0 {
		C.ggml_fp32_to_bf16_row_ref((*C.float)(unsafe.Pointer(&src[0])), (*C.sdt_bf16_t)(unsafe.Pointer(&dst[0])), C.int64_t(len(src)))
	}
	return dst
}

// BF16ToFP32Row widens bfloat16 values to floats with ggml_bf16_to_fp32_row.
func BF16ToFP32Row(src []uint16) []float32 {
	dst := make([]float32, len(src))
	if len(src) > 0 {
		C.ggml_bf16_to_fp32_row((*C.sdt_bf16_t)(unsafe.Pointer(&src[0])), (*C.float)(unsafe.Pointer(&dst[0])), C.int64_t(len(src)))
	}
	return dst
}

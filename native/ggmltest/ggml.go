//go:build cgo

package ggmltest

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

// ggml's type traits, read through a declared prefix of the struct.
typedef void (*sdt_to_float_t)(const void * x, float * y, int64_t k);
typedef void (*sdt_from_float_t)(const float * x, void * y, int64_t k);
struct ggml_type_traits {
	const char * type_name;
	int64_t blck_size;
	int64_t blck_size_interleave;
	size_t type_size;
	bool is_quantized;
	sdt_to_float_t to_float;
	sdt_from_float_t from_float_ref;
};
const struct ggml_type_traits * ggml_get_type_traits(int type);

static const char * sdt_type_name(int t) { return ggml_get_type_traits(t)->type_name; }
static int64_t sdt_blck_size(int t) { return ggml_get_type_traits(t)->blck_size; }
static size_t sdt_type_size(int t) { return ggml_get_type_traits(t)->type_size; }
static bool sdt_has_to_float(int t) { return ggml_get_type_traits(t)->to_float != NULL; }
static void sdt_to_float(int t, const void * x, float * y, int64_t k) { ggml_get_type_traits(t)->to_float(x, y, k); }
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// TypeName returns ggml's name of a type id known to the linked ggml.
func TypeName(t formats.DType) string {
	if !t.InLinkedGGML() {
		return ""
	}
	return C.GoString(C.sdt_type_name(C.int(t)))
}

// BlockLayout returns the linked ggml's elements and bytes per block of t.
func BlockLayout(t formats.DType) (block int, bytes int) {
	if !t.InLinkedGGML() {
		return 0, 0
	}
	return int(C.sdt_blck_size(C.int(t))), int(C.sdt_type_size(C.int(t)))
}

// QuantizeChunk runs ggml_quantize_chunk on the rows of nPerRow floats in
// src and returns their encoding; weights is nil (ggml's reference path) or
// nPerRow importance values. It is native.QuantizeChunkInto with the output
// allocated.
func QuantizeChunk(t formats.DType, src []float32, nPerRow int, weights []float32) ([]byte, error) {
	rb, err := t.RowBytes(int64(nPerRow))
	if err != nil || nPerRow <= 0 || len(src)%nPerRow != 0 {
		// Let QuantizeChunkInto name the problem, in its order of checks.
		return nil, native.QuantizeChunkInto(t, nil, src, nPerRow, weights)
	}
	dst := make([]byte, int64(len(src)/nPerRow)*rb)
	if err := native.QuantizeChunkInto(t, dst, src, nPerRow, weights); err != nil {
		return nil, err
	}
	return dst, nil
}

// Dequantize decodes n elements of type t with ggml's to_float.
func Dequantize(t formats.DType, src []byte, n int) ([]float32, error) {
	if !t.InLinkedGGML() || !bool(C.sdt_has_to_float(C.int(t))) {
		return nil, fmt.Errorf("ggml: no dequantizer for %s", t)
	}
	need, err := t.RowBytes(int64(n))
	if err != nil {
		return nil, fmt.Errorf("ggml: %v", err)
	}
	if int64(len(src)) < need {
		return nil, fmt.Errorf("ggml: %d bytes for %d elements of %s, want %d", len(src), n, t, need)
	}
	dst := make([]float32, n)
	if n == 0 {
		return dst, nil
	}
	C.sdt_to_float(C.int(t), unsafe.Pointer(&src[0]), (*C.float)(unsafe.Pointer(&dst[0])), C.int64_t(n))
	return dst, nil
}

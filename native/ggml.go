//go:build cgo

package native

/*
#cgo CFLAGS: -O2
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

// Declarations of the part of ggml's C API that sdtool uses; ggml itself is
// compiled by the blank-imported ollama package.
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
size_t ggml_quantize_chunk(int type, const float * src, void * dst, int64_t start, int64_t nrows, int64_t n_per_row, const float * imatrix);
bool ggml_quantize_requires_imatrix(int type);
void ggml_quantize_init(int type);

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

	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src"

	"github.com/sdtool/sdtool/formats"
)

// Available reports whether ggml is linked into this binary.
const Available = true

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

// RequiresImatrix reports whether ggml refuses to quantize t without importance weights.
func RequiresImatrix(t formats.DType) bool {
	return t.InLinkedGGML() && bool(C.ggml_quantize_requires_imatrix(C.int(t)))
}

// QuantizeChunk runs ggml_quantize_chunk on nrows rows of nPerRow floats.
// weights is nil (ggml's reference path) or nPerRow importance values. Inputs
// are checked first, because ggml aborts the process on a failed assert.
func QuantizeChunk(t formats.DType, src []float32, nPerRow int, weights []float32) ([]byte, error) {
	if !t.InLinkedGGML() {
		return nil, fmt.Errorf("ggml: type %s is not in the linked ggml", t)
	}
	switch t {
	case formats.Q8_1, formats.Q8_K, formats.I8, formats.I16, formats.I32, formats.I64, formats.F64:
		return nil, fmt.Errorf("ggml: cannot quantize to %s", t)
	}
	if nPerRow <= 0 || len(src)%nPerRow != 0 {
		return nil, fmt.Errorf("ggml: %d floats is not a whole number of rows of %d", len(src), nPerRow)
	}
	rb, err := t.RowBytes(int64(nPerRow))
	if err != nil {
		return nil, fmt.Errorf("ggml: %v", err)
	}
	if weights != nil && len(weights) != nPerRow {
		return nil, fmt.Errorf("ggml: %d importance weights for rows of %d", len(weights), nPerRow)
	}
	if weights == nil && RequiresImatrix(t) {
		return nil, fmt.Errorf("ggml: %s needs importance weights", t)
	}
	nrows := len(src) / nPerRow
	dst := make([]byte, int64(nrows)*rb+1)
	if nrows == 0 {
		return dst[:0], nil
	}
	var w *C.float
	if weights != nil {
		w = (*C.float)(unsafe.Pointer(&weights[0]))
	}
	n := C.ggml_quantize_chunk(C.int(t), (*C.float)(unsafe.Pointer(&src[0])), unsafe.Pointer(&dst[0]),
		0, C.int64_t(nrows), C.int64_t(nPerRow), w)
	if int64(n) != int64(nrows)*rb {
		return nil, fmt.Errorf("ggml: quantize %s wrote %d bytes, want %d", t, n, int64(nrows)*rb)
	}
	return dst[:n], nil
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

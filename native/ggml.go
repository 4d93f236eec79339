//go:build cgo

package native

/*
#cgo CFLAGS: -O2
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

// Declarations of the part of ggml's quantization API that sdtool's codecs
// call; ggml itself is compiled by the blank-imported ollama package.
size_t ggml_quantize_chunk(int type, const float * src, void * dst, int64_t start, int64_t nrows, int64_t n_per_row, const float * imatrix);
bool ggml_quantize_requires_imatrix(int type);
void ggml_quantize_init(int type);
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

// RequiresImatrix reports whether ggml refuses to quantize t without importance weights.
func RequiresImatrix(t formats.DType) bool {
	return t.InLinkedGGML() && bool(C.ggml_quantize_requires_imatrix(C.int(t)))
}

// QuantizeInit builds ggml's search tables for t (ggml_quantize_init), which
// takes seconds for some grid types. ggml_quantize_chunk does it on first
// use under a global lock; calling it up front keeps that cost out of the
// first row. It is a no-op for types without tables or unknown to ggml.
func QuantizeInit(t formats.DType) {
	if t.InLinkedGGML() {
		C.ggml_quantize_init(C.int(t))
	}
}

// QuantizeChunkInto runs ggml_quantize_chunk on the rows of nPerRow floats
// in src, writing into dst, which must be exactly the encoded size of the
// rows; it allocates nothing. weights is nil (ggml's reference path) or
// nPerRow importance values. Inputs are checked first, because ggml aborts
// the process on a failed assert.
func QuantizeChunkInto(t formats.DType, dst []byte, src []float32, nPerRow int, weights []float32) error {
	if !t.InLinkedGGML() {
		return fmt.Errorf("ggml: type %s is not in the linked ggml", t)
	}
	switch t {
	case formats.Q8_1, formats.Q8_K, formats.I8, formats.I16, formats.I32, formats.I64, formats.F64:
		return fmt.Errorf("ggml: cannot quantize to %s", t)
	}
	if nPerRow <= 0 || len(src)%nPerRow != 0 {
		return fmt.Errorf("ggml: %d floats is not a whole number of rows of %d", len(src), nPerRow)
	}
	rb, err := t.RowBytes(int64(nPerRow))
	if err != nil {
		return fmt.Errorf("ggml: %v", err)
	}
	nrows := len(src) / nPerRow
	if int64(len(dst)) != int64(nrows)*rb {
		return fmt.Errorf("ggml: output of %d bytes for %d rows of %s, want %d", len(dst), nrows, t, int64(nrows)*rb)
	}
	if weights != nil && len(weights) != nPerRow {
		return fmt.Errorf("ggml: %d importance weights for rows of %d", len(weights), nPerRow)
	}
	if weights == nil && RequiresImatrix(t) {
		return fmt.Errorf("ggml: %s needs importance weights", t)
	}
	if nrows == 0 {
		return nil
	}
	var w *C.float
	if weights != nil {
		w = (*C.float)(unsafe.Pointer(&weights[0]))
	}
	n := C.ggml_quantize_chunk(C.int(t), (*C.float)(unsafe.Pointer(&src[0])), unsafe.Pointer(&dst[0]),
		0, C.int64_t(nrows), C.int64_t(nPerRow), w)
	if int64(n) != int64(nrows)*rb {
		return fmt.Errorf("ggml: quantize %s wrote %d bytes, want %d", t, n, int64(nrows)*rb)
	}
	return nil
}

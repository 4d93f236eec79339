//go:build !cgo

package native

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
)

// The twin of ggml.go for binaries built without cgo.

// Available reports whether ggml is linked into this binary.
const Available = false

// RequiresImatrix reports false: without ggml nothing is quantized here.
func RequiresImatrix(t formats.DType) bool { return false }

// QuantizeInit does nothing.
func QuantizeInit(t formats.DType) {}

// QuantizeChunkInto returns an error wrapping ErrNoCgo.
func QuantizeChunkInto(t formats.DType, dst []byte, src []float32, nPerRow int, weights []float32) error {
	return fmt.Errorf("quantize %s: %w", t, ErrNoCgo)
}

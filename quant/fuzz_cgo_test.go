//go:build cgo

package quant

import (
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native/ggmltest"
)

func init() {
	fuzzCompare = func(t *testing.T, typ formats.DType, src []float32, n int, weights []float32, got []byte) {
		want, err := ggmltest.QuantizeChunk(typ, src, n, weights)
		if err != nil {
			t.Fatalf("ggml: %v", err)
		}
		if i := firstDiffBlock(got, want, typ.Info().BlockBytes); i >= 0 {
			reportBlock(t, typ, rowSet{name: "fuzz", nPerRow: n, data: src}, weightSet{name: "fuzz", vec: weights}, got, want, i)
		}
	}
}

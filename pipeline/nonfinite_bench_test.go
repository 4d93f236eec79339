package pipeline

import (
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/tensor"
)

// BenchmarkCountNonFinite measures the scan the engine adds to every
// chunk whose producer does not count its own damage: a bit test for
// float types, a decode for block types (copied ggml tensors).
func BenchmarkCountNonFinite(b *testing.B) {
	const elems = 1 << 22
	for _, t := range []formats.DType{formats.F16, formats.F32, formats.Q4_K, formats.Q8_0} {
		rb, _ := t.RowBytes(elems)
		buf := make([]byte, rb)
		var s tensor.Scratch
		b.Run(t.String(), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				countNonFinite(t, buf, &s)
			}
		})
	}
}

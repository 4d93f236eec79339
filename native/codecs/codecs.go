package codecs

import (
	"fmt"
	"sync"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/quant"
)

func init() {
	if !native.Available {
		return // quant.Encoder then says that these types need ggml
	}
	for _, t := range GridIQTypes {
		quant.Register(quant.Codec{
			Type:         t,
			Quantize:     gridQuantizer(t),
			UsesWeights:  true,
			NeedsWeights: native.RequiresImatrix(t),
			Native:       true,
		})
	}
}

// ones is the importance vector used for a block of a type that ggml only
// quantizes with one when the caller passes none, as stable-diffusion.cpp
// does when it has no imatrix.
var ones = func() []float32 {
	v := make([]float32, 256)
	for i := range v {
		v[i] = 1
	}
	return v
}()

// scratch holds one block of sanitized values and importance values.
type scratch struct{ x, w [256]float32 }

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// gridQuantizer returns the quant.Codec Quantize function for grid type t.
//
// Preconditions (programmer errors, reported by a panic that
// quant.QuantizeRows turns into an error): src is a whole, positive number
// of 256-element blocks, dst is exactly its encoded size, and weights is nil
// or as long as src. They are checked before ggml is called, because ggml
// aborts the process on a failed assert.
//
// Behaviour: each block goes to ggml_quantize_chunk as it is unless ggml's
// search could abort on it (see sanitizeGridBlock for the rules), so
// ordinary input gets exactly ggml's bytes. With nil weights, the types that
// ggml refuses to quantize without an imatrix (iq2_xxs, iq2_xs, iq1_s) use a
// vector of ones, as stable-diffusion.cpp does; callers that want to warn
// about that can check Codec.NeedsWeights. ggml's search tables for t are
// built on first use (seconds for some types).
func gridQuantizer(t formats.DType) func(dst []byte, src, weights []float32) {
	bb := t.Info().BlockBytes
	needsWeights := native.RequiresImatrix(t)
	var once sync.Once
	return func(dst []byte, src, weights []float32) {
		if err := checkGridRow(t, dst, src, weights); err != nil {
			panic(err)
		}
		once.Do(func() { native.QuantizeInit(t) })
		s := scratchPool.Get().(*scratch)
		defer scratchPool.Put(s)
		for b := 0; b < len(src)/256; b++ {
			x := src[256*b : 256*(b+1)]
			var w []float32
			if weights != nil {
				w = weights[256*b : 256*(b+1)]
			} else if needsWeights {
				w = ones
			}
			x, w = sanitizeGridBlock(x, w, s.x[:], s.w[:])
			if err := native.QuantizeChunkInto(t, dst[bb*b:bb*(b+1)], x, 256, w); err != nil {
				panic(fmt.Sprintf("quantize %s block %d: %v", t, b, err))
			}
		}
	}
}

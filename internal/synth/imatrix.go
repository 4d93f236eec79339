package synth

import (
	"math/rand/v2"
	"strings"

	"github.com/sdtool/sdtool/quant/imatrix"
)

// Imatrix returns a synthetic importance matrix for the linear weights of
// spec's model (2-D `.weight` tensors of the text encoder and the diffusion
// model, the layers stable-diffusion.cpp collects), as if ncall matrix
// multiplications had been seen: per-column mean squared activations drawn
// from a heavy-tailed distribution, so that a few columns matter far more
// than the rest. It is made for tests and examples, not collected from a
// real generation.
func Imatrix(spec Spec, ncall int) (*imatrix.Matrix, error) {
	ts, err := Tensors(spec)
	if err != nil {
		return nil, err
	}
	return imatrixFor(ts, spec.Seed, ncall), nil
}

// Imatrix returns a synthetic importance matrix for the model's linear
// weights, drawn as the package-level Imatrix draws one for a Spec.
func (c SD) Imatrix(ncall int) *imatrix.Matrix { return imatrixFor(c.Tensors(), c.Seed, ncall) }

func imatrixFor(ts []TensorSpec, seed int64, ncall int) *imatrix.Matrix {
	r := rand.New(rand.NewPCG(uint64(seed), 0x1a7))
	m := &imatrix.Matrix{ChunkCount: ncall, Datasets: []string{"synthetic"}}
	for _, t := range ts {
		if len(t.Shape) != 2 || !strings.HasSuffix(t.Name, ".weight") ||
			!(strings.HasPrefix(t.Name, "model.diffusion_model.") || strings.HasPrefix(t.Name, "cond_stage_model.")) ||
			strings.Contains(t.Name, "embedding") {
			continue
		}
		n := int(t.Shape[1])
		e := &imatrix.Entry{Name: t.Name, NCall: ncall, Sum2: make([]float32, n), Counts: []float32{float32(ncall)}}
		for i := range e.Sum2 {
			x := r.NormFloat64()
			e.Sum2[i] = float32(x*x*(0.1+r.ExpFloat64())) * float32(ncall)
		}
		m.Entries = append(m.Entries, e)
	}
	return m
}

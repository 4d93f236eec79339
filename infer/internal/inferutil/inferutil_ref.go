//go:build cgo

package inferutil

import (
	"math"
	"testing"

	"github.com/sdtool/sdtool/infer"
)

// RefRoPEAngle is the angle of pair k of a head split into axes for a
// token at pos: pos[a]·theta^(-2j/axes[a]) for the axis a holding k.
func RefRoPEAngle(axes []int, theta float64, pos [3]float64, k int) float64 {
	for a, w := range axes {
		if k < w/2 {
			return pos[a] * math.Pow(theta, -2*float64(k)/float64(w))
		}
		k -= w / 2
	}
	panic("pair outside the head")
}

// RefRotate rotates each adjacent pair of every head of tokens x [L][heads·d].
func RefRotate(x []float32, l, heads, d int, cos, sin []float32) []float32 {
	out := make([]float32, len(x))
	for tok := 0; tok < l; tok++ {
		for h := 0; h < heads; h++ {
			for j := 0; j < d/2; j++ {
				i := tok*heads*d + h*d + 2*j
				c, s := float64(cos[tok*d/2+j]), float64(sin[tok*d/2+j])
				x0, x1 := float64(x[i]), float64(x[i+1])
				out[i], out[i+1] = float32(x0*c-x1*s), float32(x0*s+x1*c)
			}
		}
	}
	return out
}

// RefLinear is W·x + b for W [out][in] stored row-major.
func RefLinear(w, b []float32, x []float64) []float64 {
	out := make([]float64, len(b))
	for o := range out {
		acc := float64(b[o])
		for i, v := range x {
			acc += float64(w[o*len(x)+i]) * v
		}
		out[o] = acc
	}
	return out
}

// RenderTiny loads the one-file model at path (closed when the test
// ends), checks its family and renders one 32x32 step of "a cat" without
// a negative pass, failing on NaN pixels.
func RenderTiny(t *testing.T, path, family string) *infer.Model {
	t.Helper()
	m, err := infer.Load(infer.Components{"model": path}, infer.LoadOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if m.Family.Name() != family {
		t.Fatalf("family %s, want %s", m.Family.Name(), family)
	}
	res, err := m.Generate(infer.Request{Prompt: "a cat", Width: 32, Height: 32, Steps: 1, CFGScale: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.NaNPixels != 0 {
		t.Fatalf("%d NaN pixels", res.NaNPixels)
	}
	return m
}

package synth

import (
	"strings"
	"testing"
)

// A scaled Flux keeps 128-wide heads (its RoPE axes, 16+56+56, fix them) and
// has fewer of them, so that generate can run it; a DiT narrower than one
// head has one head as wide as the DiT.
func TestScaledFluxKeepsHeadWidth(t *testing.T) {
	for _, c := range []struct {
		scale      float64
		head, wide int64
	}{{0.25, 128, 1024}, {1.0 / 12, 128, 256}, {0.02, 64, 64}} {
		ts, err := Tensors(Spec{Arch: "flux", Scale: c.scale, Depth: 1})
		if err != nil {
			t.Fatal(err)
		}
		var head, wide int64
		for _, tt := range ts {
			switch {
			case strings.HasSuffix(tt.Name, "img_attn.norm.query_norm.scale"):
				head = tt.Shape[0]
			case tt.Name == "img_in.weight":
				wide = tt.Shape[0]
			}
		}
		if head != c.head || wide != c.wide {
			t.Errorf("scale %g: heads %d wide in a %d-wide DiT, want %d in %d", c.scale, head, wide, c.head, c.wide)
		}
	}
}

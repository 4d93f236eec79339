//go:build cgo

package sd3

import (
	"math"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/internal/synth"
)

// TestTinySD3Generates runs synth.TinySD3 (testdata/tiny-sd3.gguf) one
// step (the negative pass is the parity test's), and checks the
// conditioning's layout: CLIP-L and CLIP-G
// side by side over 77 tokens, T5's 77 tokens below them, the two pooled
// outputs as the vector.
func TestTinySD3Generates(t *testing.T) {
	longtest.Skip(t, "the tiny SD3's render (its blocks are tested fast)")
	path := t.TempDir() + "/tiny-sd3.gguf"
	if err := synth.TinySD3.WriteSingle(path); err != nil {
		t.Fatal(err)
	}
	m := inferutil.RenderTiny(t, path, "sd3")
	cfg := m.Config.Network.(*SD3Config)
	if cfg.Depth != 2 || cfg.Heads != 2 || cfg.XSelf != 1 || cfg.QKNorm != "rms" || cfg.PosMax != 16 || cfg.ContextDim != 64 || cfg.ADMIn != 64 {
		t.Errorf("config %+v", cfg)
	}
	pos, err := m.Encode("a cat", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	neg, err := m.Encode("", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	if pos.Tokens != 154 || pos.Dim != 64 || len(pos.Vector) != 64 {
		t.Fatalf("%d tokens %d wide, vector of %d: want 154, 64, 64", pos.Tokens, pos.Dim, len(pos.Vector))
	}
	// CLIP-L fills columns 0-31 and CLIP-G 32-63 of the first 77 tokens;
	// T5 the next 77. Each part is non-zero and depends on the prompt.
	part := func(c *infer.Conditioning, r0, r1, c0, c1 int) []float32 {
		var out []float32
		for r := r0; r < r1; r++ {
			out = append(out, c.Context[r*64+c0:r*64+c1]...)
		}
		return out
	}
	for _, p := range []struct {
		name           string
		r0, r1, c0, c1 int
	}{{"CLIP-L", 0, 77, 0, 32}, {"CLIP-G", 0, 77, 32, 64}, {"T5", 77, 154, 0, 64}} {
		a, b := part(pos, p.r0, p.r1, p.c0, p.c1), part(neg, p.r0, p.r1, p.c0, p.c1)
		if slices.Equal(a, b) {
			t.Errorf("%s: the prompt's states equal the empty prompt's", p.name)
		}
		var s float64
		for _, v := range a {
			s += math.Abs(float64(v))
		}
		if s == 0 {
			t.Errorf("%s: all zero", p.name)
		}
	}
	if slices.Equal(pos.Vector, neg.Vector) {
		t.Error("the pooled vector does not depend on the prompt")
	}
}

package infer

import (
	"slices"
	"testing"
)

// TestHoldFirstFrame checks image-to-video's hold on a latent [C, frames,
// h, w]: each channel's first latent frame comes from the init latent and
// the rest stay; held frames see a timestep of 0, the others the step's.
func TestHoldFirstFrame(t *testing.T) {
	const c, frames, w, h = 3, 4, 2, 1
	init := make([]float32, c*frames*w*h)
	x := make([]float32, len(init))
	for i := range init {
		init[i], x[i] = float32(100+i), float32(-i)
	}
	d := &guidedDenoiser{w: w, h: h, frames: frames, init: init, held: 1}
	d.hold(x)
	for ch := range c {
		for f := range frames {
			for k := range w * h {
				i := (ch*frames+f)*w*h + k
				want := float32(-i)
				if f == 0 {
					want = init[i]
				}
				if x[i] != want {
					t.Fatalf("channel %d frame %d cell %d: %g, want %g", ch, f, k, x[i], want)
				}
			}
		}
	}
	if got := d.frameT(750); !slices.Equal(got, []float32{0, 750, 750, 750}) {
		t.Errorf("frame timesteps %v", got)
	}
	if got := d.frameT(250); !slices.Equal(got, []float32{0, 250, 250, 250}) {
		t.Errorf("frame timesteps at the next step %v", got)
	}
}

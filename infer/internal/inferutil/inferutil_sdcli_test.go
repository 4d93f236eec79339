//go:build cgo

package inferutil

import "testing"

// SDCLIStepSeconds adds Wan 2.2 A14B's high-noise sampling to the
// low-noise one and takes out the weights loaded lazily inside sampling.
func TestSDCLIStepSeconds(t *testing.T) {
	for _, c := range []struct {
		log   string
		steps int
		want  float64
	}{
		{"[INFO ] generating image: 1/1\n[INFO ] loading tensors completed, taking 1.50s\n[INFO ] sampling completed, taking 9.50s\n", 2, 4},
		{"[INFO ] sampling(high noise) completed, taking 3.00s\n[INFO ] sampling completed, taking 6.00s\n", 3, 3},
	} {
		if got := SDCLIStepSeconds(t, []byte(c.log), c.steps); got != c.want {
			t.Errorf("%q over %d steps: %g s/step, want %g", c.log, c.steps, got, c.want)
		}
	}
}

package infer_test

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
)

// Example_txt2img shows the pure-Go half of a generation: schedule, starting noise, sampling. The
// denoiser here is a stand-in; the real one runs the UNet on x*c_in at timestep SigmaToT(sigma), applies
// CFG with Guide and converts with Prediction.Denoised.
func Example_txt2img() {
	sched := infer.SDNoiseSchedule()
	sigmas, err := sched.Sigmas(infer.SchedulerKarras, 20)
	if err != nil {
		panic(err)
	}
	rng := infer.NewPhilox(42)
	x := make([]float32, 4*8*8) // a 64x64 image's latent
	rng.FillNormal(x)
	infer.NoiseLatent(x, nil, x, sigmas[0])

	out := make([]float32, len(x))
	denoise := func(x []float32, sigma float32) []float32 {
		// Pretend the model predicts the noise perfectly for a latent of all 0.25.
		for i := range x {
			eps := (x[i] - 0.25) / sigma
			out[i] = eps
		}
		infer.EpsPrediction.Denoised(out, x, out, sigma)
		return out
	}
	if err := infer.Sample(infer.EulerAncestral, denoise, x, sigmas, rng, nil); err != nil {
		panic(err)
	}
	fmt.Printf("%.4f %.4f\n", x[0], x[len(x)-1])
	// Output: 0.2500 0.2500
}

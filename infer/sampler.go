package infer

import (
	"errors"
	"fmt"
	"math"
)

// Denoiser returns the model's estimate of the clean latent (k-diffusion's "denoised") for the noisy
// latent x at noise level sigma. The caller builds it: scale x by c_in, run the UNet at timestep
// NoiseSchedule.SigmaToT(sigma), apply classifier-free guidance, and combine with Prediction.Denoised. The
// returned slice must have len(x) values and may be reused by the denoiser on its next call; x must not
// be modified. A denoiser that fails returns nil, and the sampler stops with ErrDenoiser (the denoiser
// keeps its own error for the caller to report).
type Denoiser func(x []float32, sigma float32) []float32

// StepFunc is called after every sampling step with the 1-based step number, the number of steps, the
// sigma the step started from and the updated latent (read only, valid during the call). A non-nil error
// stops sampling and is returned.
type StepFunc func(step, steps int, sigma float32, x []float32) error

// ErrDenoiser is returned when the denoiser reports failure (returns nil).
var ErrDenoiser = errors.New("denoiser failed")

// Method names a sampler.
type Method string

// The samplers sdtool implements, with sd-cli's --sampling-method names.
const (
	// Euler is k-diffusion's sample_euler without churn.
	Euler Method = "euler"
	// EulerAncestral is k-diffusion's sample_euler_ancestral with eta 1 (sd-cli's default for SD 1.x/2.x).
	EulerAncestral Method = "euler_a"
	// DPMPP2M is k-diffusion's sample_dpmpp_2m.
	DPMPP2M Method = "dpm++2m"
)

// ParseMethod checks a --sampling-method value; "" and "default" mean euler_a, as in sd-cli.
func ParseMethod(name string) (Method, error) {
	switch name {
	case "", "default", string(EulerAncestral):
		return EulerAncestral, nil
	case string(Euler):
		return Euler, nil
	case string(DPMPP2M):
		return DPMPP2M, nil
	}
	return "", fmt.Errorf("unknown sampling method %q (want %q, %q or %q)", name, Euler, EulerAncestral, DPMPP2M)
}

// A1111Name returns the sampler's name as A1111 writes it in PNG parameters ("Euler a", "DPM++ 2M").
func (m Method) A1111Name() string {
	switch m {
	case Euler:
		return "Euler"
	case EulerAncestral:
		return "Euler a"
	case DPMPP2M:
		return "DPM++ 2M"
	}
	return string(m)
}

// Sample runs the sampler over sigmas (decreasing, usually ending with 0) and updates x in place; x must
// hold the starting latent (for txt2img: noise * sigmas[0], see NoiseLatent). Euler ancestral draws one
// NoiseSource call of len(x) values per step, except after the last (sigma 0), as sd.cpp does, so a seed
// gives sd.cpp's trajectory; the other samplers ignore noise (it may be nil). To reproduce sd-cli, seed one
// generator, draw the starting noise from it (one FillNormal of the latent's size) and pass that same
// generator here: sd-cli's sampler continues the generator that drew the starting latent (unless its
// --sampler-rng names another kind). step may be nil. Sample allocates its buffers once, never per step.
func Sample(method Method, denoise Denoiser, x, sigmas []float32, noise NoiseSource, step StepFunc) error {
	if len(sigmas) < 2 {
		return fmt.Errorf("sampling needs at least 2 sigmas, got %d", len(sigmas))
	}
	for i, s := range sigmas {
		if !(s >= 0) || math.IsInf(float64(s), 0) {
			return fmt.Errorf("sigma %d is %v", i, s)
		}
	}
	for i := 0; i+1 < len(sigmas); i++ {
		if sigmas[i] == 0 {
			return fmt.Errorf("sigma %d is 0 before the last step", i)
		}
	}
	steps := len(sigmas) - 1
	call := func(i int) ([]float32, error) {
		d := denoise(x, sigmas[i])
		if d == nil {
			return nil, fmt.Errorf("step %d of %d (sigma %g): %w", i+1, steps, sigmas[i], ErrDenoiser)
		}
		if len(d) != len(x) {
			return nil, fmt.Errorf("step %d of %d: denoiser returned %d values for %d", i+1, steps, len(d), len(x))
		}
		return d, nil
	}
	report := func(i int) error {
		if step == nil {
			return nil
		}
		return step(i+1, steps, sigmas[i], x)
	}
	switch method {
	case Euler:
		for i := 0; i < steps; i++ {
			den, err := call(i)
			if err != nil {
				return err
			}
			eulerStep(x, den, sigmas[i], sigmas[i+1])
			if err := report(i); err != nil {
				return err
			}
		}
	case EulerAncestral:
		if noise == nil {
			return errors.New("euler_a needs a noise source")
		}
		buf := make([]float32, len(x))
		for i := 0; i < steps; i++ {
			den, err := call(i)
			if err != nil {
				return err
			}
			down, up := AncestralStep(sigmas[i], sigmas[i+1])
			eulerStep(x, den, sigmas[i], down)
			if sigmas[i+1] > 0 {
				noise.FillNormal(buf)
				for j, n := range buf {
					x[j] += float32(n * up)
				}
			}
			if err := report(i); err != nil {
				return err
			}
		}
	case DPMPP2M:
		old := make([]float32, len(x))
		for i := 0; i < steps; i++ {
			den, err := call(i)
			if err != nil {
				return err
			}
			dpmpp2mStep(x, den, old, sigmas, i)
			copy(old, den)
			if err := report(i); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown sampling method %q", method)
	}
	return nil
}

// eulerStep moves x from sigma to next along d = (x - denoised) / sigma.
func eulerStep(x, den []float32, sigma, next float32) {
	dt := next - sigma
	den = den[:len(x)]
	for j := range x {
		d := (x[j] - den[j]) / sigma
		x[j] += float32(d * dt)
	}
}

// AncestralStep splits the step from sigma to next into a deterministic part down to sigmaDown and fresh
// noise of standard deviation sigmaUp (k-diffusion's get_ancestral_step with eta 1).
func AncestralStep(sigma, next float32) (sigmaDown, sigmaUp float32) {
	// Explicit conversions keep every product rounded on its own (no fused multiply-add), as sd.cpp's
	// build computes it.
	s2, n2 := float32(sigma*sigma), float32(next*next)
	up := float32(math.Sqrt(float64(float32(n2*(s2-n2)) / s2)))
	up = min(next, up)
	down := float32(math.Sqrt(float64(n2 - float32(up*up))))
	return down, up
}

// dpmpp2mStep is one DPM-Solver++(2M) step from sigmas[i] to sigmas[i+1] in k-diffusion's form (first
// order on the first and last steps, second order from the previous denoised estimate otherwise).
func dpmpp2mStep(x, den, old, sigmas []float32, i int) {
	tFn := func(s float32) float32 { return float32(-math.Log(float64(s))) }
	s, next := sigmas[i], sigmas[i+1]
	t, tNext := tFn(s), tFn(next)
	h := tNext - t
	a := next / s
	b := float32(math.Exp(float64(-h))) - 1
	den = den[:len(x)]
	if i == 0 || next == 0 {
		for j := range x {
			x[j] = float32(a*x[j]) - float32(b*den[j])
		}
		return
	}
	hLast := t - tFn(sigmas[i-1])
	r := hLast / h
	c1 := 1 + 1/(2*r)
	c2 := 1 / (2 * r)
	old = old[:len(x)]
	for j := range x {
		d := float32(c1*den[j]) - float32(c2*old[j])
		x[j] = float32(a*x[j]) - float32(b*d)
	}
}

// NoiseLatent writes the starting latent of sampling into dst: latent + noise*sigma, as sd.cpp's noise
// scaling does (latent is nil for txt2img, giving noise*sigma). dst may alias noise or latent.
func NoiseLatent(dst, latent, noise []float32, sigma float32) {
	noise = noise[:len(dst)]
	if latent == nil {
		for j := range dst {
			dst[j] = noise[j] * sigma
		}
		return
	}
	latent = latent[:len(dst)]
	for j := range dst {
		dst[j] = latent[j] + float32(noise[j]*sigma)
	}
}

// Prediction is what the UNet predicts: the noise (eps, SD 1.x and SD 2.x base) or v (SD 2.x 768-v).
type Prediction int

const (
	// EpsPrediction: the model predicts the added noise.
	EpsPrediction Prediction = iota
	// VPrediction: the model predicts v = alpha*eps - sigma_t*x0 (Salimans & Ho 2022).
	VPrediction
)

// ParsePrediction checks a --prediction value ("eps" or "v").
func ParsePrediction(name string) (Prediction, error) {
	switch name {
	case "eps", "epsilon":
		return EpsPrediction, nil
	case "v", "v_prediction":
		return VPrediction, nil
	}
	return 0, fmt.Errorf("unknown prediction %q (want eps or v)", name)
}

// String returns "eps" or "v".
func (p Prediction) String() string {
	if p == VPrediction {
		return "v"
	}
	return "eps"
}

// Scalings returns k-diffusion's CompVis scalings at sigma (sigma_data = 1): the model input is x*cIn and
// denoised = x*cSkip + output*cOut. Eps: cSkip 1, cOut -sigma. V: cSkip 1/(sigma²+1),
// cOut -sigma/sqrt(sigma²+1). Both: cIn 1/sqrt(sigma²+1).
func (p Prediction) Scalings(sigma float32) (cSkip, cOut, cIn float32) {
	s2 := float32(sigma*sigma) + 1
	root := float32(math.Sqrt(float64(s2)))
	cIn = 1 / root
	if p == VPrediction {
		return 1 / s2, -sigma / root, cIn
	}
	return 1, -sigma, cIn
}

// Denoised writes x*cSkip + out*cOut into dst (the clean-latent estimate from the model output out,
// which is already guided). dst may alias x or out.
func (p Prediction) Denoised(dst, x, out []float32, sigma float32) {
	cSkip, cOut, _ := p.Scalings(sigma)
	x, out = x[:len(dst)], out[:len(dst)]
	for j := range dst {
		dst[j] = float32(x[j]*cSkip) + float32(out[j]*cOut)
	}
}

// Guide applies classifier-free guidance in place: cond becomes uncond + scale*(cond - uncond).
func Guide(cond, uncond []float32, scale float32) {
	uncond = uncond[:len(cond)]
	for j := range cond {
		cond[j] = uncond[j] + float32(scale*(cond[j]-uncond[j]))
	}
}

package infer

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// Timesteps is the number of training timesteps of Stable Diffusion's discrete schedule.
const Timesteps = 1000

// Stable Diffusion's scaled-linear beta schedule: betas run linearly in sqrt space from
// sqrt(SDLinearStart) to sqrt(SDLinearEnd).
const (
	// SDLinearStart is the first beta of SD 1.x/2.x/XL.
	SDLinearStart = 0.00085
	// SDLinearEnd is the last beta of SD 1.x/2.x/XL.
	SDLinearEnd = 0.012
)

// NoiseSchedule is a discrete (CompVis / LDM) noise schedule: sigma_t = sqrt((1 - alphabar_t) / alphabar_t)
// for the 1000 training timesteps. Everything is computed in float32 in the order stable-diffusion.cpp
// uses, so that the sigmas (and hence the sampled latents) agree with it bit for bit where the math
// library's float functions agree.
type NoiseSchedule struct {
	alphasCumprod [Timesteps]float32
	sigmas        [Timesteps]float32
	logSigmas     [Timesteps]float32
}

// NewNoiseSchedule returns the scaled-linear schedule from linearStart to linearEnd (SDLinearStart and
// SDLinearEnd for Stable Diffusion).
func NewNoiseSchedule(linearStart, linearEnd float32) *NoiseSchedule {
	s := &NoiseSchedule{}
	lo := float32(math.Sqrt(float64(linearStart)))
	hi := float32(math.Sqrt(float64(linearEnd)))
	amount := hi - lo
	product := float32(1)
	for i := 0; i < Timesteps; i++ {
		beta := lo + float32(amount*(float32(i)/float32(Timesteps-1)))
		product *= 1 - float32(beta*beta)
		s.alphasCumprod[i] = product
		s.sigmas[i] = float32(math.Sqrt(float64((1 - product) / product)))
		s.logSigmas[i] = float32(math.Log(float64(s.sigmas[i])))
	}
	return s
}

// SDNoiseSchedule returns Stable Diffusion's schedule (betas 0.00085 to 0.012, 1000 steps).
func SDNoiseSchedule() *NoiseSchedule { return NewNoiseSchedule(SDLinearStart, SDLinearEnd) }

// AlphaCumprod returns alphabar_t for timestep t (clamped to 0..999).
func (s *NoiseSchedule) AlphaCumprod(t int) float32 {
	return s.alphasCumprod[min(max(t, 0), Timesteps-1)]
}

// Sigma returns sigma_t for timestep t (clamped to 0..999).
func (s *NoiseSchedule) Sigma(t int) float32 { return s.sigmas[min(max(t, 0), Timesteps-1)] }

// SigmaMin returns the smallest sigma (timestep 0), about 0.0292 for SD.
func (s *NoiseSchedule) SigmaMin() float32 { return s.sigmas[0] }

// SigmaMax returns the largest sigma (timestep 999), about 14.6146 for SD.
func (s *NoiseSchedule) SigmaMax() float32 { return s.sigmas[Timesteps-1] }

// SigmaToT maps a sigma to a fractional timestep by linear interpolation of log sigma between the two
// neighbouring training sigmas (clamped to 0..999), as k-diffusion's DiscreteSchedule.sigma_to_t does.
// This is the timestep the UNet's time embedding receives. Sigmas of 0 or below, and NaN, give 0.
func (s *NoiseSchedule) SigmaToT(sigma float32) float32 {
	if !(sigma > 0) {
		return 0
	}
	ls := float32(math.Log(float64(sigma)))
	// Number of log sigmas <= ls; the table is strictly increasing.
	count := sort.Search(Timesteps, func(i int) bool { return ls-s.logSigmas[i] < 0 })
	low := min(max(count-1, 0), Timesteps-2)
	high := low + 1
	lo, hi := s.logSigmas[low], s.logSigmas[high]
	w := (lo - ls) / (lo - hi)
	w = max(0, min(1, w))
	return float32((1-w)*float32(low)) + float32(w*float32(high))
}

// TToSigma maps a fractional timestep to a sigma by interpolating log sigma linearly; t is clamped to
// 0..999.
func (s *NoiseSchedule) TToSigma(t float32) float32 {
	if !(t > 0) {
		t = 0
	}
	t = min(t, Timesteps-1)
	low := int(math.Floor(float64(t)))
	high := int(math.Ceil(float64(t)))
	w := t - float32(low)
	ls := float32((1-w)*s.logSigmas[low]) + float32(w*s.logSigmas[high])
	return float32(math.Exp(float64(ls)))
}

// Schedule is a family's noise schedule: the range of noise levels, the map between sigmas and the
// timesteps the network is trained on, and the sampling sigmas a Scheduler spaces between them.
// *NoiseSchedule (SD's discrete schedule) is one; flow-matching families add their own.
type Schedule interface {
	// SigmaMin and SigmaMax are the smallest and largest noise levels.
	SigmaMin() float32
	SigmaMax() float32
	// SigmaToT returns the timestep the network gets for a noise level.
	SigmaToT(sigma float32) float32
	// TToSigma returns the noise level of a (fractional) timestep in [0, Timesteps-1].
	TToSigma(t float32) float32
	// Sigmas returns steps+1 decreasing sigmas for sampling, the last one 0.
	Sigmas(kind Scheduler, steps int) ([]float32, error)
}

// Scheduler names a way to choose the sampling sigmas.
type Scheduler string

// The schedulers sdtool implements (sd-cli's --scheduler names).
const (
	// SchedulerDiscrete spaces the timesteps evenly from 999 down to 0 and maps each to its sigma.
	SchedulerDiscrete Scheduler = "discrete"
	// SchedulerKarras uses Karras et al. (2022) eq. 5 with rho = 7 between the schedule's extreme sigmas.
	SchedulerKarras Scheduler = "karras"
	// SchedulerSimple takes every (1000/steps)-th training timestep from 999 down (ComfyUI's "simple").
	SchedulerSimple Scheduler = "simple"
	// SchedulerSGMUniform spaces steps+1 timesteps evenly from 999 to 0 and drops the last (the SGM uniform schedule).
	SchedulerSGMUniform Scheduler = "sgm_uniform"
)

// schedulerNames lists the schedulers in the order help and errors name
// them: the core's spacings, then those a family's file adds from init.
var schedulerNames = []Scheduler{SchedulerDiscrete, SchedulerKarras, SchedulerSimple, SchedulerSGMUniform}

// Schedulers lists the schedulers this build implements, in the order
// help and errors name them.
func Schedulers() []Scheduler { return slices.Clone(schedulerNames) }

// ParseScheduler checks a --scheduler value: "" and "default" return "" (the family's default),
// "normal" is discrete, as in sd-cli.
func ParseScheduler(name string) (Scheduler, error) {
	switch name {
	case "", "default":
		return "", nil
	case "normal":
		return SchedulerDiscrete, nil
	}
	for _, k := range schedulerNames {
		if name == string(k) {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown scheduler %q (want one of %v)", name, schedulerNames)
}

// SpacedSigmas returns steps+1 decreasing sigmas of schedule s for the schedulers every family shares
// (discrete, karras, simple, sgm_uniform), as sd.cpp computes them, the last one 0.
func SpacedSigmas(s Schedule, kind Scheduler, steps int) ([]float32, error) {
	if steps < 1 {
		return nil, fmt.Errorf("steps must be at least 1, got %d", steps)
	}
	switch kind {
	case SchedulerDiscrete, "":
		return discreteSigmas(s, steps), nil
	case SchedulerKarras:
		return KarrasSigmas(steps, s.SigmaMin(), s.SigmaMax(), 7), nil
	case SchedulerSimple:
		out := make([]float32, 0, steps+1)
		factor := float32(Timesteps) / float32(steps)
		for i := 0; i < steps; i++ {
			t := Timesteps - 1 - int(float32(i)*factor)
			out = append(out, s.TToSigma(float32(max(t, 0))))
		}
		return append(out, 0), nil
	case SchedulerSGMUniform:
		out := make([]float32, 0, steps+1)
		// sd.cpp's linear_space accumulates the increment in float32.
		inc := (0 - float32(Timesteps-1)) / float32(steps)
		t := float32(Timesteps - 1)
		for i := 0; i < steps; i++ {
			out = append(out, s.TToSigma(t))
			t += inc
		}
		return append(out, 0), nil
	}
	return nil, fmt.Errorf("unknown scheduler %q", kind)
}

// Sigmas returns steps+1 decreasing sigmas for sampling, the last one 0 (SpacedSigmas).
func (s *NoiseSchedule) Sigmas(kind Scheduler, steps int) ([]float32, error) {
	return SpacedSigmas(s, kind, steps)
}

// discreteSigmas spaces steps timesteps evenly from 999 to 0 (sd.cpp's DiscreteScheduler; one step is
// timestep 999 alone) and appends 0.
func discreteSigmas(s Schedule, steps int) []float32 {
	out := make([]float32, 0, steps+1)
	const tMax = float32(Timesteps - 1)
	if steps == 1 {
		return append(out, s.TToSigma(tMax), 0)
	}
	step := tMax / float32(steps-1)
	for i := 0; i < steps; i++ {
		out = append(out, s.TToSigma(tMax-float32(step*float32(i))))
	}
	return append(out, 0)
}

// KarrasSigmas returns steps sigmas from sigmaMax down to sigmaMin, evenly spaced in sigma^(1/rho)
// (Karras et al. 2022, eq. 5), then 0. sigmaMin is raised to 1e-6 when smaller, as in sd.cpp; a single
// step is sigmaMax alone (sd.cpp divides by zero there).
func KarrasSigmas(steps int, sigmaMin, sigmaMax, rho float32) []float32 {
	if steps < 1 {
		return []float32{0}
	}
	sigmaMin = max(sigmaMin, 1e-6)
	out := make([]float32, steps+1)
	invRho := 1 / rho
	minInv := float32(math.Pow(float64(sigmaMin), float64(invRho)))
	maxInv := float32(math.Pow(float64(sigmaMax), float64(invRho)))
	if steps == 1 {
		out[0] = sigmaMax
		return out
	}
	for i := 0; i < steps; i++ {
		frac := float32(i) / float32(steps-1)
		base := maxInv + float32(frac*(minInv-maxInv))
		out[i] = float32(math.Pow(float64(base), float64(rho)))
	}
	return out
}

// Img2ImgSigmas keeps the tail of sigmas that img2img samples at the given strength, as sd.cpp does:
// with n = len(sigmas)-1 steps, t_enc = floor(n*strength) (at most n-1), and sampling starts at sigma
// index n-t_enc-1 and runs t_enc+1 steps, so strength 1 keeps everything and a strength below 1/n keeps
// one step. The result shares sigmas' storage.
func Img2ImgSigmas(sigmas []float32, strength float32) []float32 {
	n := len(sigmas) - 1
	if n < 1 {
		return sigmas
	}
	strength = max(0, min(1, strength))
	tEnc := int(float32(n) * strength)
	if tEnc >= n {
		tEnc = n - 1
	}
	return sigmas[n-tEnc-1:]
}

func init() {
	sd := SDNoiseSchedule()
	schedules["discrete"] = func(*Model, int, int) Schedule { return sd }
}

package flux

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/infer"
)

// SchedulerFlux is sd-cli's "flux" schedule (its default for Flux.1): steps
// times evenly spaced in (0, 1] through the time shift exp(mu)/(exp(mu) +
// (1/t - 1)), mu rising linearly with the image's latent cells from 0.5 at
// 256 to 1.15 at 4096 (BFL's resolution-dependent shift), then 0.
const SchedulerFlux infer.Scheduler = "flux"

// flowSchedule is a flow-matching schedule as sd.cpp's FluxFlowDenoiser
// holds it: sigma(t) = fluxTimeShift(shift, (t+1)/1000) for the
// timestep-spaced schedulers, the network sees sigma itself (its time
// embedding scales by 1000), and cells (the latent's width × height) sets
// the "flux" schedule's shift.
type flowSchedule struct {
	shift float32
	cells int
}

// fluxTimeShift is exp(mu) / (exp(mu) + (1/t - 1)^sigma) in float32, as sd.cpp computes it.
func fluxTimeShift(mu, sigma, t float32) float32 {
	e := float32(math.Exp(float64(mu)))
	return e / (e + float32(math.Pow(float64(1/t-1), float64(sigma))))
}

// SigmaMin is the noise level of timestep 0.
func (s *flowSchedule) SigmaMin() float32 { return s.TToSigma(0) }

// SigmaMax is the noise level of timestep 999 (1).
func (s *flowSchedule) SigmaMax() float32 { return s.TToSigma(infer.Timesteps - 1) }

// SigmaToT returns sigma: Flux's time embedding takes the noise level.
func (s *flowSchedule) SigmaToT(sigma float32) float32 { return sigma }

// TToSigma maps a timestep in [0, 999] to its shifted noise level.
func (s *flowSchedule) TToSigma(t float32) float32 {
	return fluxTimeShift(s.shift, 1, (t+1)/infer.Timesteps)
}

// Sigmas returns the "flux" schedule, or one of the shared spacings of TToSigma.
func (s *flowSchedule) Sigmas(kind infer.Scheduler, steps int) ([]float32, error) {
	if kind != SchedulerFlux {
		return infer.SpacedSigmas(s, kind, steps)
	}
	if steps < 1 {
		return nil, fmt.Errorf("steps must be at least 1, got %d", steps)
	}
	return FluxSigmas(steps, s.cells), nil
}

// FluxSigmas returns sd-cli's "flux" schedule for steps steps on a latent
// of cells cells (width × height in latent cells, not patches).
func FluxSigmas(steps, cells int) []float32 {
	const baseShift, maxShift = float32(0.5), float32(1.15)
	m := (maxShift - baseShift) / (4096 - 256)
	b := baseShift - m*256
	mu := float32(cells)*m + b
	out := make([]float32, steps+1)
	for i := 0; i < steps; i++ {
		t := 1 - float32(i)/float32(steps)
		out[i] = fluxTimeShift(mu, 1, t)
	}
	return out
}

func init() {
	infer.RegisterScheduler(SchedulerFlux)
	infer.RegisterSchedule("flux", func(m *infer.Model, w, h int) infer.Schedule {
		return &flowSchedule{shift: m.Family.FlowShift, cells: w * h}
	})
}

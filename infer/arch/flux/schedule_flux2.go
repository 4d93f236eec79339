package flux

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
)

// SchedulerFlux2 is sd-cli's "flux2" schedule (its default for Flux.2):
// steps times evenly spaced in (0, 1] through the time shift
// exp(mu)/(exp(mu) + (1/t - 1)), mu fitted by BFL to the image's token
// count and the step count (Flux2Mu), then 0.
const SchedulerFlux2 infer.Scheduler = "flux2"

// flux2Schedule is Flux.1's flow schedule with the "flux2" sigmas; cells
// counts the image tokens (latent cells / 4).
type flux2Schedule struct {
	flowSchedule
}

// Sigmas returns the "flux2" schedule, or one of the flow schedule's.
func (s *flux2Schedule) Sigmas(kind infer.Scheduler, steps int) ([]float32, error) {
	if kind != SchedulerFlux2 {
		return s.flowSchedule.Sigmas(kind, steps)
	}
	if steps < 1 {
		return nil, fmt.Errorf("steps must be at least 1, got %d", steps)
	}
	return Flux2Sigmas(steps, s.cells), nil
}

// Flux2Mu is BFL's empirical time shift for tokens image tokens and
// steps steps, in float32 as sd.cpp computes it: linear in the step count
// between fits at 10 and 200 steps, or the 200-step fit past 4300 tokens.
func Flux2Mu(tokens, steps int) float32 {
	const a1, b1 = float32(8.73809524e-05), float32(1.89833333)
	const a2, b2 = float32(0.00016927), float32(0.45666666)
	n := float32(tokens)
	if tokens > 4300 {
		return a2*n + b2
	}
	m200 := a2*n + b2
	m10 := a1*n + b1
	a := (m200 - m10) / 190
	b := m200 - 200*a
	return a*float32(steps) + b
}

// Flux2Sigmas returns sd-cli's "flux2" schedule for steps steps on an
// image of tokens image tokens (1/16 of its width times 1/16 of its height).
func Flux2Sigmas(steps, tokens int) []float32 {
	mu := Flux2Mu(tokens, steps)
	out := make([]float32, steps+1)
	out[0] = 1
	for i := 1; i < steps; i++ {
		out[i] = fluxTimeShift(mu, 1, 1-float32(i)/float32(steps))
	}
	return out
}

func init() {
	infer.RegisterScheduler(SchedulerFlux2)
	infer.RegisterSchedule("flux2", func(m *infer.Model, w, h int) infer.Schedule {
		return &flux2Schedule{flowSchedule{shift: m.Family.FlowShift, cells: w * h / 4}}
	})
}

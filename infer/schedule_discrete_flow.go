package infer

// discreteFlowSchedule is sd.cpp's DiscreteFlowDenoiser (Family.Schedule
// "discrete-flow", the schedule of Wan and SD3): timestep t in [0, 999]
// has the noise level shift·s/(1 + (shift-1)·s) of s = (t+1)/1000, and
// the network sees sigma·1000. The shift is --flow-shift (the family's
// FlowShift when unset).
type discreteFlowSchedule struct {
	shift float32
}

// timeSNRShift is shift·t/(1 + (shift-1)·t) in float32 (t itself when shift is 1), as sd.cpp computes it.
func timeSNRShift(shift, t float32) float32 {
	if shift == 1 {
		return t
	}
	return shift * t / (1 + (shift-1)*t)
}

// SigmaMin is the noise level of timestep 0.
func (s *discreteFlowSchedule) SigmaMin() float32 { return s.TToSigma(0) }

// SigmaMax is the noise level of timestep 999 (1).
func (s *discreteFlowSchedule) SigmaMax() float32 { return s.TToSigma(Timesteps - 1) }

// SigmaToT returns sigma·1000, the timestep the network embeds.
func (s *discreteFlowSchedule) SigmaToT(sigma float32) float32 { return sigma * 1000 }

// TToSigma maps a timestep in [0, 999] to its shifted noise level.
func (s *discreteFlowSchedule) TToSigma(t float32) float32 {
	return timeSNRShift(s.shift, (t+1)/1000)
}

// Sigmas returns one of the shared spacings of TToSigma (SpacedSigmas).
func (s *discreteFlowSchedule) Sigmas(kind Scheduler, steps int) ([]float32, error) {
	return SpacedSigmas(s, kind, steps)
}

func init() {
	schedules["discrete-flow"] = func(m *Model, w, h int) Schedule {
		return &discreteFlowSchedule{shift: m.FlowShift()}
	}
}

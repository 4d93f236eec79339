package infer

// DiscreteFlowSchedule is sd.cpp's DiscreteFlowDenoiser (Family.Schedule
// "discrete-flow", the schedule of Wan and SD3): timestep t in [0, 999]
// has the noise level shift·s/(1 + (shift-1)·s) of s = (t+1)/1000, and
// the network sees sigma·1000. The shift is --flow-shift (the family's
// FlowShift when unset).
type DiscreteFlowSchedule struct {
	Shift float32
}

// timeSNRShift is shift·t/(1 + (shift-1)·t) in float32 (t itself when shift is 1), as sd.cpp computes it.
func timeSNRShift(shift, t float32) float32 {
	if shift == 1 {
		return t
	}
	return shift * t / (1 + (shift-1)*t)
}

// SigmaMin is the noise level of timestep 0.
func (s *DiscreteFlowSchedule) SigmaMin() float32 { return s.TToSigma(0) }

// SigmaMax is the noise level of timestep 999 (1).
func (s *DiscreteFlowSchedule) SigmaMax() float32 { return s.TToSigma(Timesteps - 1) }

// SigmaToT returns sigma·1000, the timestep the network embeds.
func (s *DiscreteFlowSchedule) SigmaToT(sigma float32) float32 { return sigma * 1000 }

// TToSigma maps a timestep in [0, 999] to its shifted noise level.
func (s *DiscreteFlowSchedule) TToSigma(t float32) float32 {
	return timeSNRShift(s.Shift, (t+1)/1000)
}

// Sigmas returns one of the shared spacings of TToSigma (SpacedSigmas).
func (s *DiscreteFlowSchedule) Sigmas(kind Scheduler, steps int) ([]float32, error) {
	return SpacedSigmas(s, kind, steps)
}

func init() {
	schedules["discrete-flow"] = func(m *Model, w, h int) Schedule {
		return &DiscreteFlowSchedule{Shift: m.FlowShift()}
	}
}

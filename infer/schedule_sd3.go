package infer

// sd3FlowSchedule is sd.cpp's DiscreteFlowDenoiser as SD3 uses it
// (Family.Schedule "sd3-flow"): timestep t in [0, 999] has the noise
// level shift·s/(1 + (shift-1)·s) of s = (t+1)/1000 in float32, and the
// network sees sigma·1000; the shift is the family's FlowShift (3).
type sd3FlowSchedule struct {
	shift float32
}

// SigmaMin is the noise level of timestep 0.
func (s *sd3FlowSchedule) SigmaMin() float32 { return s.TToSigma(0) }

// SigmaMax is the noise level of timestep 999 (1).
func (s *sd3FlowSchedule) SigmaMax() float32 { return s.TToSigma(Timesteps - 1) }

// SigmaToT returns sigma·1000, the timestep the MMDiT embeds.
func (s *sd3FlowSchedule) SigmaToT(sigma float32) float32 { return sigma * 1000 }

// TToSigma maps a timestep in [0, 999] to its shifted noise level.
func (s *sd3FlowSchedule) TToSigma(t float32) float32 {
	x := (t + 1) / 1000
	return s.shift * x / (1 + (s.shift-1)*x)
}

// Sigmas returns one of the shared spacings of TToSigma.
func (s *sd3FlowSchedule) Sigmas(kind Scheduler, steps int) ([]float32, error) {
	return SpacedSigmas(s, kind, steps)
}

func init() {
	schedules["sd3-flow"] = func(m *Model, w, h int) Schedule { return &sd3FlowSchedule{shift: m.Family.FlowShift} }
}

package infer

// discreteFlowSchedule is a flow-matching schedule as sd.cpp's
// DiscreteFlowDenoiser holds it (Family.Schedule "discrete-flow": SD3, Qwen-Image, Wan): timestep
// t in [0, 999] has noise level shift·u / (1 + (shift-1)·u), u = (t+1)/1000,
// and the network's time embedding takes sigma·1000.
type discreteFlowSchedule struct {
	shift float32
}

// SigmaMin is the noise level of timestep 0.
func (s *discreteFlowSchedule) SigmaMin() float32 { return s.TToSigma(0) }

// SigmaMax is the noise level of timestep 999 (1).
func (s *discreteFlowSchedule) SigmaMax() float32 { return s.TToSigma(Timesteps - 1) }

// SigmaToT returns sigma·1000, the timestep the network embeds.
func (s *discreteFlowSchedule) SigmaToT(sigma float32) float32 { return sigma * 1000 }

// TToSigma maps a timestep in [0, 999] to its shifted noise level, in
// float32 as sd.cpp's time_snr_shift computes it (u itself for shift 1).
func (s *discreteFlowSchedule) TToSigma(t float32) float32 {
	u := (t + 1) / Timesteps
	if s.shift == 1 {
		return u
	}
	return s.shift * u / (1 + (s.shift-1)*u)
}

// Sigmas returns one of the shared spacings of TToSigma (sd-cli's default: discrete).
func (s *discreteFlowSchedule) Sigmas(kind Scheduler, steps int) ([]float32, error) {
	return SpacedSigmas(s, kind, steps)
}

func init() {
	schedules["discrete-flow"] = func(m *Model, w, h int) Schedule {
		return &discreteFlowSchedule{shift: m.Family.FlowShift}
	}
}

package zimage

import "github.com/sdtool/sdtool/infer"

// zimageSchedule is Z-Image's flow-matching schedule, as sd.cpp's
// DiscreteFlowDenoiser holds it with Z-Image's timestep: sigma(t) =
// shift·u/(1 + (shift-1)·u) with u = (t+1)/1000 (SD3's time-SNR shift) for
// every spacing, and the DiT sees 1000 - 1000·sigma (the share of data in
// the latent, scaled to the training timesteps).
type zimageSchedule struct {
	shift float32
}

// SigmaMin is the noise level of timestep 0.
func (s *zimageSchedule) SigmaMin() float32 { return s.TToSigma(0) }

// SigmaMax is the noise level of timestep 999 (1).
func (s *zimageSchedule) SigmaMax() float32 { return s.TToSigma(infer.Timesteps - 1) }

// SigmaToT returns the timestep Z-Image's time embedding takes, in float32
// in sd.cpp's order (sigma·1000 first).
func (s *zimageSchedule) SigmaToT(sigma float32) float32 {
	t := sigma * 1000
	return 1000 - t
}

// TToSigma maps a timestep in [0, 999] to its shifted noise level.
func (s *zimageSchedule) TToSigma(t float32) float32 {
	return zimageTimeShift(s.shift, (t+1)/infer.Timesteps)
}

// zimageTimeShift is shift·u/(1 + (shift-1)·u) in float32 (u itself for shift 1).
func zimageTimeShift(shift, u float32) float32 {
	if shift == 1 {
		return u
	}
	return shift * u / (1 + float32((shift-1)*u))
}

// Sigmas returns one of the shared spacings of TToSigma.
func (s *zimageSchedule) Sigmas(kind infer.Scheduler, steps int) ([]float32, error) {
	return infer.SpacedSigmas(s, kind, steps)
}

func init() {
	infer.RegisterSchedule("zimage", func(m *infer.Model, w, h int) infer.Schedule { return &zimageSchedule{shift: m.FlowShift()} })
}

package infer

import (
	"math"
	"testing"
)

func relErr(got float32, want float64) float64 {
	return math.Abs(float64(got)-want) / math.Abs(want)
}

func TestSDScheduleSigmas(t *testing.T) {
	s := SDNoiseSchedule()
	// The extremes published with sd.cpp's Align-Your-Steps tables (SD 1.5's first and last noise level).
	if e := relErr(s.SigmaMax(), 14.6146412293); e > 2e-5 {
		t.Errorf("sigma max %v (rel err %g)", s.SigmaMax(), e)
	}
	if e := relErr(s.SigmaMin(), 0.0291671582); e > 2e-5 {
		t.Errorf("sigma min %v (rel err %g)", s.SigmaMin(), e)
	}
	// An independent float64 computation of diffusers' scaled_linear schedule.
	lo, hi := math.Sqrt(SDLinearStart), math.Sqrt(SDLinearEnd)
	prod := 1.0
	for i := 0; i < Timesteps; i++ {
		beta := lo + (hi-lo)*float64(i)/float64(Timesteps-1)
		prod *= 1 - beta*beta
		if e := relErr(s.AlphaCumprod(i), prod); e > 1e-5 {
			t.Fatalf("alphabar[%d] = %v, float64 %v", i, s.AlphaCumprod(i), prod)
		}
		if e := relErr(s.Sigma(i), math.Sqrt((1-prod)/prod)); e > 2e-5 {
			t.Fatalf("sigma[%d] = %v, float64 %v", i, s.Sigma(i), math.Sqrt((1-prod)/prod))
		}
		if i > 0 && !(s.Sigma(i) > s.Sigma(i-1)) {
			t.Fatalf("sigmas not increasing at %d", i)
		}
	}
}

func TestSigmaTimestepMapping(t *testing.T) {
	s := SDNoiseSchedule()
	for _, tt := range []float32{0, 0.25, 1, 17.5, 500, 998.5, 999} {
		sig := s.TToSigma(tt)
		back := s.SigmaToT(sig)
		if math.Abs(float64(back-tt)) > 2e-3 {
			t.Errorf("SigmaToT(TToSigma(%v)) = %v", tt, back)
		}
	}
	// Integer timesteps hit the table; halfway points are geometric means (log-linear interpolation).
	if relErr(s.TToSigma(10), float64(s.Sigma(10))) > 1e-6 {
		t.Errorf("TToSigma(10) %v != Sigma(10) %v", s.TToSigma(10), s.Sigma(10))
	}
	gm := math.Sqrt(float64(s.Sigma(10)) * float64(s.Sigma(11)))
	if e := relErr(s.TToSigma(10.5), gm); e > 1e-6 {
		t.Errorf("TToSigma(10.5) %v, geometric mean %v", s.TToSigma(10.5), gm)
	}
	// Clamping outside the table.
	if s.SigmaToT(1000) != 999 || s.SigmaToT(1e-4) != 0 || s.SigmaToT(0) != 0 || s.SigmaToT(float32(math.NaN())) != 0 {
		t.Errorf("clamping: %v %v %v", s.SigmaToT(1000), s.SigmaToT(1e-4), s.SigmaToT(0))
	}
	if s.TToSigma(-5) != s.TToSigma(0) || s.TToSigma(5000) != s.TToSigma(999) || relErr(s.TToSigma(0), float64(s.SigmaMin())) > 1e-6 {
		t.Errorf("TToSigma clamping")
	}
}

func TestDiscreteSigmas(t *testing.T) {
	s := SDNoiseSchedule()
	for _, steps := range []int{1, 2, 5, 20, 50} {
		sig, err := s.Sigmas(SchedulerDiscrete, steps)
		if err != nil {
			t.Fatal(err)
		}
		// exp(log(sigma)) need not give sigma's last bit back, hence the relative comparisons.
		if len(sig) != steps+1 || sig[steps] != 0 || relErr(sig[0], float64(s.SigmaMax())) > 1e-6 {
			t.Fatalf("%d steps: %v", steps, sig)
		}
		// The last timestep is 999 - step*(steps-1) in float32, a hair above 0 for some step counts.
		if steps > 1 && relErr(sig[steps-1], float64(s.SigmaMin())) > 1e-4 {
			t.Fatalf("%d steps: last sigma %v, want sigma min", steps, sig[steps-1])
		}
		for i := 1; i < steps; i++ {
			if !(sig[i] < sig[i-1]) {
				t.Fatalf("%d steps: not decreasing at %d: %v", steps, i, sig)
			}
		}
	}
	// Two steps: timesteps 999 and 0; three: 999, 499.5 and 0.
	sig, _ := s.Sigmas(SchedulerDiscrete, 3)
	if sig[1] != s.TToSigma(499.5) {
		t.Fatalf("middle sigma %v, want %v", sig[1], s.TToSigma(499.5))
	}
	if _, err := s.Sigmas(SchedulerDiscrete, 0); err == nil {
		t.Fatal("0 steps accepted")
	}
	if _, err := s.Sigmas("beta", 4); err == nil {
		t.Fatal("unknown scheduler accepted")
	}
}

func TestKarrasSigmas(t *testing.T) {
	s := SDNoiseSchedule()
	sig, err := s.Sigmas(SchedulerKarras, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(sig) != 11 || sig[10] != 0 {
		t.Fatalf("%v", sig)
	}
	if relErr(sig[0], float64(s.SigmaMax())) > 1e-6 || relErr(sig[9], float64(s.SigmaMin())) > 1e-5 {
		t.Fatalf("ends %v %v", sig[0], sig[9])
	}
	// sigma^(1/7) is evenly spaced.
	step := math.Pow(float64(sig[1]), 1.0/7) - math.Pow(float64(sig[0]), 1.0/7)
	for i := 1; i < 10; i++ {
		d := math.Pow(float64(sig[i]), 1.0/7) - math.Pow(float64(sig[i-1]), 1.0/7)
		if math.Abs(d-step) > 1e-5 {
			t.Fatalf("spacing at %d: %v vs %v", i, d, step)
		}
	}
	if one := KarrasSigmas(1, 0.03, 14.6, 7); len(one) != 2 || one[0] != 14.6 || one[1] != 0 {
		t.Fatalf("one step: %v", one)
	}
	if z := KarrasSigmas(3, 0, 1, 7); z[2] <= 0 {
		t.Fatalf("sigma min 0 not raised: %v", z)
	}
}

func TestImg2ImgSigmas(t *testing.T) {
	sig := []float32{10, 8, 6, 4, 2, 0} // 5 steps
	// t_enc = floor(5*strength), at most 4; sampling runs t_enc+1 steps, so t_enc+2 sigmas.
	cases := map[float32]int{1: 6, 0.99: 6, 0.8: 6, 0.6: 5, 0.5: 4, 0.2: 3, 0.1: 2, 0: 2, 2: 6, -1: 2}
	for strength, n := range cases {
		if got := Img2ImgSigmas(sig, strength); len(got) != n || got[len(got)-1] != 0 {
			t.Errorf("strength %v: %v, want %d sigmas", strength, got, n)
		}
	}
}

func TestParseScheduler(t *testing.T) {
	for in, want := range map[string]Scheduler{"": SchedulerDiscrete, "default": SchedulerDiscrete, "discrete": SchedulerDiscrete, "karras": SchedulerKarras} {
		if got, err := ParseScheduler(in); err != nil || got != want {
			t.Errorf("ParseScheduler(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseScheduler("exponential"); err == nil {
		t.Error("exponential accepted")
	}
}

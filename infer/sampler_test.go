package infer

import (
	"errors"
	"math"
	"testing"
)

// gaussianDenoiser is the exact denoiser of data distributed N(mu, s²) per component:
// E[x0 | x0 + sigma*n = x] = mu + s²/(s²+sigma²) (x - mu). With s = 0 the data is the point mu.
func gaussianDenoiser(mu, s float64, calls *int) Denoiser {
	var out []float32
	return func(x []float32, sigma float32) []float32 {
		if calls != nil {
			*calls++
		}
		if len(out) != len(x) {
			out = make([]float32, len(x))
		}
		k := s * s / (s*s + float64(sigma)*float64(sigma))
		for i, v := range x {
			out[i] = float32(mu + k*(float64(v)-mu))
		}
		return out
	}
}

func startLatent(n int, seed uint64, sigma float32) []float32 {
	x := NewPhilox(seed).Randn(n)
	NoiseLatent(x, nil, x, sigma)
	return x
}

func TestSamplersReachAFixedPoint(t *testing.T) {
	s := SDNoiseSchedule()
	for _, m := range []Method{Euler, EulerAncestral, DPMPP2M} {
		for _, kind := range []Scheduler{SchedulerDiscrete, SchedulerKarras} {
			sig, _ := s.Sigmas(kind, 8)
			x := startLatent(256, 1, sig[0])
			calls := 0
			if err := Sample(m, gaussianDenoiser(0.5, 0, &calls), x, sig, NewPhilox(2), nil); err != nil {
				t.Fatal(err)
			}
			if calls != 8 {
				t.Errorf("%s/%s: %d denoiser calls for 8 steps", m, kind, calls)
			}
			for i, v := range x {
				if math.Abs(float64(v)-0.5) > 1e-5 {
					t.Fatalf("%s/%s: x[%d] = %v, want 0.5", m, kind, i, v)
				}
			}
		}
	}
}

// TestODESamplersConverge checks the deterministic samplers against the exact probability-flow ODE
// solution for Gaussian data: x(sigma) - mu = (x_T - mu) * sqrt(s²+sigma²) / sqrt(s²+sigma_T²), so the
// error must shrink with the step count, about as 1/steps for Euler and 1/steps² for DPM++ 2M.
func TestODESamplersConverge(t *testing.T) {
	const mu, sd = 0.3, 0.5
	s := SDNoiseSchedule()
	errAt := func(m Method, steps int) float64 {
		sig := KarrasSigmas(steps, s.SigmaMin(), s.SigmaMax(), 7)
		x := startLatent(64, 3, sig[0])
		x0 := append([]float32(nil), x...)
		if err := Sample(m, gaussianDenoiser(mu, sd, nil), x, sig, nil, nil); err != nil {
			t.Fatal(err)
		}
		// The exact solution ends at sigma_min's successor 0: factor s / sqrt(s²+sigma_T²).
		f := sd / math.Sqrt(sd*sd+float64(sig[0])*float64(sig[0]))
		worst := 0.0
		for i := range x {
			want := mu + (float64(x0[i])-mu)*f
			worst = max(worst, math.Abs(float64(x[i])-want))
		}
		return worst
	}
	for _, c := range []struct {
		m        Method
		minRatio float64
	}{{Euler, 1.6}, {DPMPP2M, 3}} {
		e10, e20, e40 := errAt(c.m, 10), errAt(c.m, 20), errAt(c.m, 40)
		t.Logf("%s: max error %.2e (10 steps) %.2e (20) %.2e (40)", c.m, e10, e20, e40)
		if e20 > e10/c.minRatio || e40 > e20/c.minRatio {
			t.Errorf("%s does not converge at the expected order: %.2e %.2e %.2e", c.m, e10, e20, e40)
		}
	}
	if e := errAt(DPMPP2M, 40); e > 5e-3 {
		t.Errorf("dpm++2m: 40-step error %.3g", e)
	}
	if errAt(DPMPP2M, 20) >= errAt(Euler, 20) {
		t.Error("DPM++ 2M is not more accurate than Euler")
	}
}

// TestEulerAncestralDistribution: with the exact denoiser, ancestral sampling turns N(mu, s²+sigma_max²)
// noise into samples of N(mu, s²).
func TestEulerAncestralDistribution(t *testing.T) {
	const mu, sd = -0.2, 0.7
	s := SDNoiseSchedule()
	// 40 steps leave the spread about 8% short (the ancestral steps' own discretisation error); by 100
	// steps it is within 1-2%.
	sig, _ := s.Sigmas(SchedulerKarras, 100)
	const n = 1 << 13
	x := NewPhilox(11).Randn(n)
	for i := range x {
		x[i] = float32(mu) + x[i]*float32(math.Sqrt(sd*sd+float64(sig[0])*float64(sig[0])))
	}
	if err := Sample(EulerAncestral, gaussianDenoiser(mu, sd, nil), x, sig, NewPhilox(12), nil); err != nil {
		t.Fatal(err)
	}
	var m, v float64
	for _, a := range x {
		m += float64(a)
	}
	m /= n
	for _, a := range x {
		v += (float64(a) - m) * (float64(a) - m)
	}
	v /= n
	if math.Abs(m-mu) > 0.03 || math.Abs(math.Sqrt(v)-sd) > 0.03 {
		t.Fatalf("mean %.4f (want %.2f), std %.4f (want %.2f)", m, mu, math.Sqrt(v), sd)
	}
}

// refDPMPP2M is k-diffusion's sample_dpmpp_2m written as k-diffusion writes it, in float64, as an
// independent oracle for the float32 implementation.
func refDPMPP2M(x []float64, sigmas []float64, den func([]float64, float64) []float64) {
	var old []float64
	for i := 0; i+1 < len(sigmas); i++ {
		d := den(x, sigmas[i])
		t, tn := -math.Log(sigmas[i]), -math.Log(sigmas[i+1])
		h := tn - t
		if old == nil || sigmas[i+1] == 0 {
			for j := range x {
				x[j] = (sigmas[i+1]/sigmas[i])*x[j] - math.Expm1(-h)*d[j]
			}
		} else {
			r := (t - (-math.Log(sigmas[i-1]))) / h
			for j := range x {
				dd := (1+1/(2*r))*d[j] - (1/(2*r))*old[j]
				x[j] = (sigmas[i+1]/sigmas[i])*x[j] - math.Expm1(-h)*dd
			}
		}
		old = append(old[:0], d...)
	}
}

// refEulerA is k-diffusion's sample_euler_ancestral in float64 with noise from a NoiseSource.
func refEulerA(x []float64, sigmas []float64, den func([]float64, float64) []float64, noise NoiseSource) {
	buf := make([]float32, len(x))
	for i := 0; i+1 < len(sigmas); i++ {
		d := den(x, sigmas[i])
		s, sn := sigmas[i], sigmas[i+1]
		up := math.Min(sn, math.Sqrt(sn*sn*(s*s-sn*sn)/(s*s)))
		down := math.Sqrt(sn*sn - up*up)
		for j := range x {
			x[j] += (x[j] - d[j]) / s * (down - s)
		}
		if sn > 0 {
			noise.FillNormal(buf)
			for j := range x {
				x[j] += float64(buf[j]) * up
			}
		}
	}
}

func TestSamplersMatchFloat64Reference(t *testing.T) {
	const mu, sd = 0.1, 0.9
	s := SDNoiseSchedule()
	sig, _ := s.Sigmas(SchedulerDiscrete, 12)
	sig64 := make([]float64, len(sig))
	for i, v := range sig {
		sig64[i] = float64(v)
	}
	den64 := func(x []float64, sigma float64) []float64 {
		k := sd * sd / (sd*sd + sigma*sigma)
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = mu + k*(v-mu)
		}
		return out
	}
	for _, m := range []Method{DPMPP2M, EulerAncestral} {
		x := startLatent(128, 5, sig[0])
		x64 := make([]float64, len(x))
		for i, v := range x {
			x64[i] = float64(v)
		}
		if err := Sample(m, gaussianDenoiser(mu, sd, nil), x, sig, NewPhilox(9), nil); err != nil {
			t.Fatal(err)
		}
		if m == DPMPP2M {
			refDPMPP2M(x64, sig64, den64)
		} else {
			refEulerA(x64, sig64, den64, NewPhilox(9))
		}
		for i := range x {
			if math.Abs(float64(x[i])-x64[i]) > 2e-4*(1+math.Abs(x64[i])) {
				t.Fatalf("%s: x[%d] = %v, float64 reference %v", m, i, x[i], x64[i])
			}
		}
	}
}

func TestSampleDeterministic(t *testing.T) {
	s := SDNoiseSchedule()
	sig, _ := s.Sigmas(SchedulerDiscrete, 6)
	run := func(seed uint64) []float32 {
		x := startLatent(300, 4, sig[0])
		if err := Sample(EulerAncestral, gaussianDenoiser(0, 0.5, nil), x, sig, NewPhilox(seed), nil); err != nil {
			t.Fatal(err)
		}
		return x
	}
	a, b, c := run(1), run(1), run(2)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different result at %d", i)
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("different seeds, same result")
	}
}

type countingNoise struct {
	calls int
	src   NoiseSource
}

func (c *countingNoise) FillNormal(dst []float32) { c.calls++; c.src.FillNormal(dst) }

func TestSampleStepsAndCallbacks(t *testing.T) {
	s := SDNoiseSchedule()
	sig, _ := s.Sigmas(SchedulerKarras, 7)
	for _, m := range []Method{Euler, EulerAncestral, DPMPP2M} {
		x := startLatent(32, 1, sig[0])
		noise := &countingNoise{src: NewPhilox(1)}
		var seen []int
		err := Sample(m, gaussianDenoiser(0, 1, nil), x, sig, noise, func(step, steps int, sigma float32, _ []float32) error {
			if steps != 7 || sigma != sig[step-1] {
				t.Errorf("%s: step %d of %d at sigma %v", m, step, steps, sigma)
			}
			seen = append(seen, step)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != 7 || seen[0] != 1 || seen[6] != 7 {
			t.Errorf("%s: steps reported %v", m, seen)
		}
		wantNoise := 0
		if m == EulerAncestral {
			wantNoise = 6 // no noise after the last step, which ends at sigma 0
		}
		if noise.calls != wantNoise {
			t.Errorf("%s: %d noise draws, want %d", m, noise.calls, wantNoise)
		}
	}
	// A callback error stops sampling at once.
	stop := errors.New("stop")
	calls := 0
	x := startLatent(8, 1, sig[0])
	err := Sample(Euler, gaussianDenoiser(0, 1, &calls), x, sig, nil, func(step, _ int, _ float32, _ []float32) error {
		if step == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 3 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
}

func TestSampleErrors(t *testing.T) {
	x := make([]float32, 4)
	ok := gaussianDenoiser(0, 1, nil)
	cases := []struct {
		name   string
		m      Method
		den    Denoiser
		sigmas []float32
		noise  NoiseSource
	}{
		{"one sigma", Euler, ok, []float32{1}, nil},
		{"negative sigma", Euler, ok, []float32{1, -1}, nil},
		{"NaN sigma", Euler, ok, []float32{float32(math.NaN()), 0}, nil},
		{"zero before the end", Euler, ok, []float32{1, 0, 0}, nil},
		{"unknown method", "heun", ok, []float32{1, 0}, nil},
		{"euler_a without noise", EulerAncestral, ok, []float32{1, 0}, nil},
		{"failing denoiser", DPMPP2M, func([]float32, float32) []float32 { return nil }, []float32{1, 0}, nil},
		{"short output", Euler, func([]float32, float32) []float32 { return make([]float32, 2) }, []float32{1, 0}, nil},
	}
	for _, c := range cases {
		if err := Sample(c.m, c.den, x, c.sigmas, c.noise, nil); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if err := Sample(DPMPP2M, func([]float32, float32) []float32 { return nil }, x, []float32{1, 0}, nil, nil); !errors.Is(err, ErrDenoiser) {
		t.Errorf("failing denoiser: %v", err)
	}
}

func TestSampleAllocatesOnce(t *testing.T) {
	s := SDNoiseSchedule()
	den := gaussianDenoiser(0, 1, nil)
	noise := NewPhilox(0)
	x := make([]float32, 4*8*8)
	for _, m := range []Method{Euler, EulerAncestral, DPMPP2M} {
		allocs := func(steps int) float64 {
			sig, _ := s.Sigmas(SchedulerDiscrete, steps)
			return testing.AllocsPerRun(3, func() {
				NoiseLatent(x, nil, x, 0)
				if err := Sample(m, den, x, sig, noise, nil); err != nil {
					t.Fatal(err)
				}
			})
		}
		if a4, a40 := allocs(4), allocs(40); a40 != a4 || a4 > 4 {
			t.Errorf("%s: %v allocations for 4 steps, %v for 40", m, a4, a40)
		}
	}
}

func TestPredictionScalings(t *testing.T) {
	// Eps: denoised = x - sigma*eps. Check with x = x0 + sigma*eps.
	x0, eps, sigma := float32(0.4), float32(-1.3), float32(2.5)
	x := x0 + sigma*eps
	dst := make([]float32, 1)
	EpsPrediction.Denoised(dst, []float32{x}, []float32{eps}, sigma)
	if math.Abs(float64(dst[0]-x0)) > 1e-6 {
		t.Fatalf("eps: %v, want %v", dst[0], x0)
	}
	// V: on the variance-preserving scale, x_vp = x/sqrt(sigma²+1) = alpha*x0 + s*eps with
	// alpha = 1/sqrt(sigma²+1), s = sigma*alpha, and v = alpha*eps - s*x0.
	alpha := 1 / math.Sqrt(float64(sigma)*float64(sigma)+1)
	sv := float64(sigma) * alpha
	v := float32(alpha*float64(eps) - sv*float64(x0))
	VPrediction.Denoised(dst, []float32{x}, []float32{v}, sigma)
	if math.Abs(float64(dst[0]-x0)) > 1e-5 {
		t.Fatalf("v: %v, want %v", dst[0], x0)
	}
	for _, p := range []Prediction{EpsPrediction, VPrediction} {
		_, _, cIn := p.Scalings(sigma)
		if math.Abs(float64(cIn)-alpha) > 1e-7 {
			t.Fatalf("%s: c_in %v", p, cIn)
		}
	}
	if p, err := ParsePrediction("v"); err != nil || p != VPrediction || p.String() != "v" {
		t.Fatalf("ParsePrediction(v) = %v, %v", p, err)
	}
	if _, err := ParsePrediction("x0"); err == nil {
		t.Fatal("x0 accepted")
	}
}

func TestGuideAndNoiseLatent(t *testing.T) {
	cond := []float32{1, 2}
	Guide(cond, []float32{0, 1}, 7)
	if cond[0] != 7 || cond[1] != 8 {
		t.Fatalf("guide: %v", cond)
	}
	dst := make([]float32, 2)
	NoiseLatent(dst, []float32{1, 1}, []float32{0.5, -1}, 2)
	if dst[0] != 2 || dst[1] != -1 {
		t.Fatalf("noise latent: %v", dst)
	}
}

func TestParseMethod(t *testing.T) {
	for in, want := range map[string]Method{"": EulerAncestral, "euler": Euler, "euler_a": EulerAncestral, "dpm++2m": DPMPP2M} {
		if got, err := ParseMethod(in); err != nil || got != want {
			t.Errorf("ParseMethod(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseMethod("lcm"); err == nil {
		t.Error("lcm accepted")
	}
	if EulerAncestral.A1111Name() != "Euler a" || DPMPP2M.A1111Name() != "DPM++ 2M" {
		t.Error("A1111 names")
	}
}

func BenchmarkSampleStep(b *testing.B) {
	s := SDNoiseSchedule()
	sig, _ := s.Sigmas(SchedulerDiscrete, 20)
	den := func(x []float32, sigma float32) []float32 { return x } // the cheapest denoiser: measures the sampler
	for _, m := range []Method{Euler, EulerAncestral, DPMPP2M} {
		b.Run(string(m), func(b *testing.B) {
			x := make([]float32, 4*64*64) // a 512x512 latent
			noise := NewPhilox(0)
			b.ReportAllocs()
			for b.Loop() {
				if err := Sample(m, den, x, sig, noise, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/20, "ns/step")
		})
	}
}

//go:build cgo

package flux

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/infer/vae/kl"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/native"
)

// Flux.2's own pieces against plain-Go references in float64: the
// four-axis rotary embedding, the gated MLP, the VAE latent's patch
// packing with sd.cpp's statistics, and the flux2 schedule.

func TestFlux2RoPEAngles(t *testing.T) {
	axes := []int{8, 8, 8, 8}
	const theta, txt, rows, cols = 2000, 3, 2, 3
	refs := [][2]int{{3, 2}, {1, 4}} // rows, columns
	for _, n := range []int{0, 1, 2} {
		cos, sin := flux2RoPE(axes, theta, txt, rows, cols, refs[:n])
		// Text token i sits at (0, 0, 0, i), image cell (r, c) at (0, r, c, 0),
		// cell (r, c) of reference k (from 1) at (10k, r, c, 0).
		var pos [][4]float64
		for i := range txt {
			pos = append(pos, [4]float64{0, 0, 0, float64(i)})
		}
		grids := append([][2]int{{rows, cols}}, refs[:n]...)
		for k, g := range grids {
			for r := range g[0] {
				for c := range g[1] {
					pos = append(pos, [4]float64{float64(10 * k), float64(r), float64(c), 0})
				}
			}
		}
		const half = 16
		if len(cos) != len(pos)*half || len(sin) != len(cos) {
			t.Fatalf("%d references: tables of %d and %d values, want %d", n, len(cos), len(sin), len(pos)*half)
		}
		for tok, p := range pos {
			for k := 0; k < half; k++ {
				a := p[k/4] * math.Pow(theta, -2*float64(k%4)/8)
				if d := math.Abs(float64(cos[tok*half+k]) - math.Cos(a)); d > 1e-5 {
					t.Fatalf("%d references, token %d pair %d: cos %g, want %g", n, tok, k, cos[tok*half+k], math.Cos(a))
				}
				if d := math.Abs(float64(sin[tok*half+k]) - math.Sin(a)); d > 1e-5 {
					t.Fatalf("%d references, token %d pair %d: sin %g, want %g", n, tok, k, sin[tok*half+k], math.Sin(a))
				}
			}
		}
	}
}

func TestFluxGatedMLP(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(31, 32))
	const h, m, l = 8, 12, 5
	w0 := inferutil.TestWeight{Shape: []int64{2 * m, h}, Typ: formats.F32, Data: inferutil.Randn(r, 2*m*h, 0.5)}
	w2 := inferutil.TestWeight{Shape: []int64{h, m}, Typ: formats.F32, Data: inferutil.Randn(r, h*m, 0.5)}
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{"mlp.0.weight": w0, "mlp.2.weight": w2})
	x := inferutil.Randn(r, l*h, 1)
	cfg := &FluxConfig{GatedMLP: true}
	got, _ := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{h, l}, Data: x}}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
		return fluxMLP(g, cfg, in[0], "mlp")
	})
	// y = W2·(silu(u[:m])·u[m:]), u = W0·x.
	want := make([]float32, l*h)
	for tok := 0; tok < l; tok++ {
		u := make([]float64, 2*m)
		for o := range u {
			for i := 0; i < h; i++ {
				u[o] += float64(w0.Data[o*h+i]) * float64(x[tok*h+i])
			}
		}
		for o := 0; o < h; o++ {
			var s float64
			for i := 0; i < m; i++ {
				g := u[i] / (1 + math.Exp(-u[i]))
				s += float64(w2.Data[o*m+i]) * g * u[m+i]
			}
			want[tok*h+o] = float32(s)
		}
	}
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

// TestFlux2LatentPacking checks the VAE kind's latent mapping: unpacking
// gives channel c's pixel (2i+pr, 2j+pc) from patch channel c·4+2pr+pc of
// cell (i, j), scaled by its std and shifted by its mean, and packing an
// image's moments inverts it (mean first, then the log-variance of -100).
func TestFlux2LatentPacking(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{})
	r := rand.New(rand.NewPCG(33, 34))
	const c, w, h = 32, 6, 4 // the engine's latent [32, h, w]: sd.cpp's [128, h/2, w/2]
	z := inferutil.Randn(r, c*h*w, 1)
	got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{w, h, c, 1}, Data: z}}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
		return kl.Flux2Unpack(g, in[0])
	})
	if ne != [4]int64{w, h, c, 1} {
		t.Fatalf("unpacked %v", ne)
	}
	want := make([]float32, len(z))
	for ch := 0; ch < c; ch++ {
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				k := ch*4 + 2*(y%2) + x%2
				v := z[(k*(h/2)+y/2)*(w/2)+x/2]
				want[(ch*h+y)*w+x] = v*kl.Flux2LatentStd[k] + kl.Flux2LatentMean[k]
			}
		}
	}
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-6 {
		t.Errorf("unpack: relative error %g", e)
	}
	moments := append(append([]float32(nil), want...), inferutil.Randn(r, len(want), 1)...)
	back, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{w, h, 2 * c, 1}, Data: moments}}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
		return kl.Flux2Pack(g, in[0])
	})
	if ne != [4]int64{w / 2, h / 2, 8 * c, 1} {
		t.Fatalf("packed %v", ne)
	}
	if e := inferutil.MaxRelErr(t, back[:len(z)], z); e > 1e-5 {
		t.Errorf("pack(unpack(z)): relative error %g", e)
	}
	for i, v := range back[len(z):] {
		if v != -100 {
			t.Fatalf("log-variance %d: %g, want -100", i, v)
		}
	}
}

func TestFlux2Sigmas(t *testing.T) {
	for _, tc := range []struct{ steps, tokens int }{{4, 64}, {20, 4096}, {4, 4900}, {1, 16}} {
		got := Flux2Sigmas(tc.steps, tc.tokens)
		n, s := float64(tc.tokens), float64(tc.steps)
		mu := 0.00016927*n + 0.45666666
		if tc.tokens <= 4300 {
			m200, m10 := mu, 8.73809524e-05*n+1.89833333
			a := (m200 - m10) / 190
			mu = a*s + m200 - 200*a
		}
		if len(got) != tc.steps+1 || got[0] != 1 || got[tc.steps] != 0 {
			t.Fatalf("%+v: %v, want %d sigmas from 1 to 0", tc, got, tc.steps+1)
		}
		for i := 1; i < tc.steps; i++ {
			tt := 1 - float64(i)/s
			want := math.Exp(mu) / (math.Exp(mu) + 1/tt - 1)
			if d := math.Abs(float64(got[i]) - want); d > 1e-5 {
				t.Errorf("%+v: sigma %d = %g, want %g", tc, i, got[i], want)
			}
		}
	}
}

// TestDetectFlux2Layouts reads klein 4B's and 9B's layouts (BFL's widths
// and depths, shapes only) and refuses a Flux.1 DiT and a klein without
// one of its shared modulation layers, naming what is wrong.
func TestDetectFlux2Layouts(t *testing.T) {
	shapesOf := func(c synth.Flux2) map[string][]int64 {
		sh := map[string][]int64{}
		for _, ts := range c.Part("diffusion-model") {
			sh[infer.DmPrefix+ts.Name] = ts.Shape
		}
		return sh
	}
	for _, tc := range []struct {
		name string
		c    synth.Flux2
	}{
		{"klein 4B", synth.Flux2{Hidden: 3072, Heads: 24, MLP: 9216, Double: 5, Single: 20, Context: 7680}},
		{"klein 9B", synth.Flux2{Hidden: 4096, Heads: 32, MLP: 12288, Double: 8, Single: 24, Context: 12288}},
	} {
		c, err := detectFlux2(infer.Shapes(shapesOf(tc.c)), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c.Hidden != tc.c.Hidden || c.Heads != tc.c.Heads || c.HeadDim != 128 || c.MLP != tc.c.MLP || !c.GatedMLP ||
			c.Double != tc.c.Double || c.Single != tc.c.Single || c.ContextDim != tc.c.Context || c.InChannels != 128 ||
			c.VecDim != 0 || c.Guidance || c.LatentChannels() != 32 || c.Theta != 2000 || !slices.Equal(c.Axes, []int{32, 32, 32, 32}) {
			t.Errorf("%s: config %+v", tc.name, c)
		}
	}
	flux1 := map[string][]int64{}
	for _, ts := range synth.FluxParity.Part("diffusion-model") {
		flux1[infer.DmPrefix+ts.Name] = ts.Shape
	}
	if _, err := detectFlux2(infer.Shapes(flux1), nil); err == nil || !strings.Contains(err.Error(), "gated") {
		t.Errorf("Flux.1 DiT: %v", err)
	}
	broken := shapesOf(synth.Flux2{Hidden: 256, Heads: 2, MLP: 768, Double: 1, Single: 1, Context: 64})
	delete(broken, infer.DmPrefix+"single_stream_modulation.lin.weight")
	if _, err := detectFlux2(infer.Shapes(broken), nil); err == nil || !strings.Contains(err.Error(), "single_stream_modulation.lin.weight") {
		t.Errorf("missing modulation: %v", err)
	}
}

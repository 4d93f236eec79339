//go:build cgo

package flux

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/native"
)

// Flux's blocks against plain-Go references in float64: the rotary
// embedding's angles, attention with RoPE, the modulation and the patch
// layout, and the flux schedule.

func TestFluxRoPEAngles(t *testing.T) {
	axes := []int{16, 56, 56}
	const txt, rows, cols = 3, 2, 5
	cos, sin := fluxRoPE(axes, 10000, txt, rows, cols)
	half := 64
	if len(cos) != (txt+rows*cols)*half {
		t.Fatalf("%d values, want %d", len(cos), (txt+rows*cols)*half)
	}
	for tok := 0; tok < txt+rows*cols; tok++ {
		var pos [3]float64
		if tok >= txt {
			pos = [3]float64{0, float64((tok - txt) / cols), float64((tok - txt) % cols)}
		}
		for k := 0; k < half; k++ {
			a := inferutil.RefRoPEAngle(axes, 10000, pos, k)
			if d := math.Abs(float64(cos[tok*half+k]) - math.Cos(a)); d > 1e-5 {
				t.Fatalf("token %d pair %d: cos %g, want %g", tok, k, cos[tok*half+k], math.Cos(a))
			}
			if d := math.Abs(float64(sin[tok*half+k]) - math.Sin(a)); d > 1e-5 {
				t.Fatalf("token %d pair %d: sin %g, want %g", tok, k, sin[tok*half+k], math.Sin(a))
			}
		}
	}
}

func TestFluxAttentionWithRoPE(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{})
	r := rand.New(rand.NewPCG(13, 14))
	const heads, d, txt, rows, cols = 2, 16, 3, 2, 3
	l := txt + rows*cols
	cos, sin := fluxRoPE([]int{4, 6, 6}, 10000, txt, rows, cols)
	q, k, v := inferutil.Randn(r, l*heads*d, 1), inferutil.Randn(r, l*heads*d, 1), inferutil.Randn(r, l*heads*d, 1)
	got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{
		{Ne: []int64{heads * d, int64(l)}, Data: q}, {Ne: []int64{heads * d, int64(l)}, Data: k}, {Ne: []int64{heads * d, int64(l)}, Data: v},
		{Ne: []int64{d / 2, int64(l)}, Data: cos}, {Ne: []int64{d / 2, int64(l)}, Data: sin},
	}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
		h := func(x native.Tensor) native.Tensor { return g.Ctx.Reshape(x, d, heads, int64(l)) }
		return FluxAttention(g.Ctx, h(in[0]), h(in[1]), h(in[2]), in[3], in[4])
	})
	if ne != [4]int64{heads * d, int64(l), 1, 1} {
		t.Fatalf("output %v", ne)
	}
	want := inferutil.RefAttention(inferutil.RefRotate(q, l, heads, d, cos, sin), inferutil.RefRotate(k, l, heads, d, cos, sin), v, heads*d, l, l, heads, 1, false)
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
	// Without the rotation the result must differ: the test sees RoPE.
	plain := inferutil.RefAttention(q, k, v, heads*d, l, l, heads, 1, false)
	if e := inferutil.MaxRelErr(t, got, plain); e < 1e-3 {
		t.Errorf("attention with RoPE matches attention without it (%g)", e)
	}
}

func TestFluxModulation(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(15, 16))
	const h, l = 8, 5
	lin := inferutil.TestWeight{Shape: []int64{3 * h, h}, Typ: formats.F32, Data: inferutil.Randn(r, 3*h*h, 0.5)}
	bias := inferutil.TestWeight{Shape: []int64{3 * h}, Typ: formats.F32, Data: inferutil.Randn(r, 3*h, 0.1)}
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{"mod.lin.weight": lin, "mod.lin.bias": bias})
	vec, x := inferutil.Randn(r, h, 1), inferutil.Randn(r, l*h, 1)
	got, _ := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{h}, Data: vec}, {Ne: []int64{h, l}, Data: x}}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
		m := FluxMod(g, in[0], "mod.lin", 3)
		y := FluxModulate(g, g.Ctx.Norm(in[1], FluxNormEps), m[0], m[1])
		return g.Ctx.Mul(y, m[2])
	})
	// m = W·silu(vec) + b, chunks shift, scale, gate; y = LN(x)·(1+scale)+shift, times gate.
	m := make([]float64, 3*h)
	for o := range m {
		acc := float64(bias.Data[o])
		for i := 0; i < h; i++ {
			s := float64(vec[i])
			acc += float64(lin.Data[o*h+i]) * s / (1 + math.Exp(-s))
		}
		m[o] = acc
	}
	want := make([]float32, l*h)
	for tok := 0; tok < l; tok++ {
		row := x[tok*h : (tok+1)*h]
		var mean, v float64
		for _, a := range row {
			mean += float64(a)
		}
		mean /= h
		for _, a := range row {
			v += (float64(a) - mean) * (float64(a) - mean)
		}
		v /= h
		for i, a := range row {
			n := (float64(a) - mean) / math.Sqrt(v+FluxNormEps)
			want[tok*h+i] = float32((n*(1+m[h+i]) + m[i]) * m[2*h+i])
		}
	}
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

func TestFluxPatchLayout(t *testing.T) {
	const c, h, w, p = 3, 4, 6, 2
	x := make([]float32, c*h*w)
	for i := range x {
		x[i] = float32(i)
	}
	tok := Patchify(x, c, h, w, p)
	// Token (i, j) holds channel ch's 2×2 patch at feature ch·4 + 2·row + col.
	for i := 0; i < h/p; i++ {
		for j := 0; j < w/p; j++ {
			for ch := 0; ch < c; ch++ {
				for pr := 0; pr < p; pr++ {
					for pc := 0; pc < p; pc++ {
						got := tok[(i*(w/p)+j)*c*p*p+ch*p*p+pr*p+pc]
						want := x[(ch*h+i*p+pr)*w+j*p+pc]
						if got != want {
							t.Fatalf("token (%d, %d) channel %d (%d, %d): %g, want %g", i, j, ch, pr, pc, got, want)
						}
					}
				}
			}
		}
	}
	back := Unpatchify(tok, c, h, w, p)
	for i := range x {
		if back[i] != x[i] {
			t.Fatalf("round trip: value %d is %g, want %g", i, back[i], x[i])
		}
	}
}

func TestFluxSigmas(t *testing.T) {
	// 128x128: 256 latent cells, mu = 0.5; 1024x1024: 16384 cells.
	for _, cells := range []int{256, 16384} {
		mu := 0.5 + (1.15-0.5)/(4096-256)*float64(cells-256)
		s := FluxSigmas(4, cells)
		if len(s) != 5 || s[4] != 0 {
			t.Fatalf("%d cells: sigmas %v", cells, s)
		}
		for i := 0; i < 4; i++ {
			tt := 1 - float64(i)/4
			want := math.Exp(mu) / (math.Exp(mu) + (1/tt - 1))
			if math.Abs(float64(s[i])-want) > 1e-6 {
				t.Errorf("%d cells: sigma %d is %g, want %g", cells, i, s[i], want)
			}
		}
	}
	fs := &flowSchedule{shift: 1.15}
	if got, want := fs.TToSigma(499), math.Exp(1.15)/(math.Exp(1.15)+1); math.Abs(float64(got)-want) > 1e-6 {
		t.Errorf("TToSigma(499) = %g, want %g", got, want)
	}
	if fs.SigmaToT(0.25) != 0.25 {
		t.Errorf("SigmaToT(0.25) = %g, want 0.25 (the DiT embeds sigma)", fs.SigmaToT(0.25))
	}
}

func TestDetectFlux(t *testing.T) {
	sh := map[string][]int64{}
	for _, ts := range synth.FluxParity.Part("diffusion-model") {
		sh[infer.DmPrefix+ts.Name] = ts.Shape
	}
	c, err := detectFlux(infer.Shapes(sh), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hidden != 768 || c.Heads != 6 || c.HeadDim != 128 || c.Double != 2 || c.Single != 2 || c.MLP != 3072 ||
		c.InChannels != 64 || c.ContextDim != 512 || c.VecDim != 768 || !c.Guidance || c.LatentChannels() != 16 {
		t.Errorf("config %+v", c)
	}
	// A block missing a tensor, or of another width, is named.
	broken := map[string][]int64{}
	for k, v := range sh {
		broken[k] = v
	}
	delete(broken, infer.DmPrefix+"single_blocks.1.linear2.weight")
	if _, err := detectFlux(infer.Shapes(broken), nil); err == nil || !strings.Contains(err.Error(), "single_blocks.1.linear2.weight") {
		t.Errorf("missing tensor: %v", err)
	}
	broken[infer.DmPrefix+"single_blocks.1.linear2.weight"] = []int64{768, 100}
	if _, err := detectFlux(infer.Shapes(broken), nil); err == nil || !strings.Contains(err.Error(), "single_blocks.1.linear2.weight") {
		t.Errorf("misshapen tensor: %v", err)
	}
	// Heads that are not 128 wide need the axes in the metadata.
	narrow := map[string][]int64{}
	for _, ts := range synth.TinyFlux.Part("diffusion-model") {
		narrow[infer.DmPrefix+ts.Name] = ts.Shape
	}
	for k := range narrow {
		if strings.HasSuffix(k, "_norm.scale") {
			narrow[k] = []int64{64}
		}
	}
	if _, err := detectFlux(infer.Shapes(narrow), nil); err == nil || !strings.Contains(err.Error(), MetaFluxAxes) {
		t.Errorf("64-wide heads without axes: %v", err)
	}
	// The schnell layout has no guidance_in.
	delete(sh, infer.DmPrefix+"guidance_in.in_layer.weight")
	fam, err := infer.DetectFamily(sh)
	if err != nil || fam.Name() != "flux-schnell" {
		t.Errorf("without guidance_in: family %v, %v", fam, err)
	}
}

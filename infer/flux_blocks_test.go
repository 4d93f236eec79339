//go:build cgo

package infer

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
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
			a := refRoPEAngle(axes, 10000, pos, k)
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
	be := newTestBackend(t)
	ws := makeWeights(t, be, map[string]testWeight{})
	r := rand.New(rand.NewPCG(13, 14))
	const heads, d, txt, rows, cols = 2, 16, 3, 2, 3
	l := txt + rows*cols
	cos, sin := fluxRoPE([]int{4, 6, 6}, 10000, txt, rows, cols)
	q, k, v := randn(r, l*heads*d, 1), randn(r, l*heads*d, 1), randn(r, l*heads*d, 1)
	got, ne := runGraph(t, be, ws, []testInput{
		{[]int64{heads * d, int64(l)}, q}, {[]int64{heads * d, int64(l)}, k}, {[]int64{heads * d, int64(l)}, v},
		{[]int64{d / 2, int64(l)}, cos}, {[]int64{d / 2, int64(l)}, sin},
	}, func(g *builder, in []native.Tensor) native.Tensor {
		h := func(x native.Tensor) native.Tensor { return g.c.Reshape(x, d, heads, int64(l)) }
		return fluxAttention(g.c, h(in[0]), h(in[1]), h(in[2]), in[3], in[4])
	})
	if ne != [4]int64{heads * d, int64(l), 1, 1} {
		t.Fatalf("output %v", ne)
	}
	want := refAttention(refRotate(q, l, heads, d, cos, sin), refRotate(k, l, heads, d, cos, sin), v, heads*d, l, l, heads, 1, false)
	if e := maxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
	// Without the rotation the result must differ: the test sees RoPE.
	plain := refAttention(q, k, v, heads*d, l, l, heads, 1, false)
	if e := maxRelErr(t, got, plain); e < 1e-3 {
		t.Errorf("attention with RoPE matches attention without it (%g)", e)
	}
}

func TestFluxModulation(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(15, 16))
	const h, l = 8, 5
	lin := testWeight{shape: []int64{3 * h, h}, typ: formats.F32, data: randn(r, 3*h*h, 0.5)}
	bias := testWeight{shape: []int64{3 * h}, typ: formats.F32, data: randn(r, 3*h, 0.1)}
	ws := makeWeights(t, be, map[string]testWeight{"mod.lin.weight": lin, "mod.lin.bias": bias})
	vec, x := randn(r, h, 1), randn(r, l*h, 1)
	got, _ := runGraph(t, be, ws, []testInput{{[]int64{h}, vec}, {[]int64{h, l}, x}}, func(g *builder, in []native.Tensor) native.Tensor {
		m := g.fluxMod(in[0], "mod.lin", 3)
		y := g.fluxModulate(g.c.Norm(in[1], fluxNormEps), m[0], m[1])
		return g.c.Mul(y, m[2])
	})
	// m = W·silu(vec) + b, chunks shift, scale, gate; y = LN(x)·(1+scale)+shift, times gate.
	m := make([]float64, 3*h)
	for o := range m {
		acc := float64(bias.data[o])
		for i := 0; i < h; i++ {
			s := float64(vec[i])
			acc += float64(lin.data[o*h+i]) * s / (1 + math.Exp(-s))
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
			n := (float64(a) - mean) / math.Sqrt(v+fluxNormEps)
			want[tok*h+i] = float32((n*(1+m[h+i]) + m[i]) * m[2*h+i])
		}
	}
	if e := maxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

func TestFluxPatchLayout(t *testing.T) {
	const c, h, w, p = 3, 4, 6, 2
	x := make([]float32, c*h*w)
	for i := range x {
		x[i] = float32(i)
	}
	tok := patchify(x, c, h, w, p)
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
	back := unpatchify(tok, c, h, w, p)
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
		sh[dmPrefix+ts.Name] = ts.Shape
	}
	c, err := detectFlux(shapes(sh), nil)
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
	delete(broken, dmPrefix+"single_blocks.1.linear2.weight")
	if _, err := detectFlux(shapes(broken), nil); err == nil || !strings.Contains(err.Error(), "single_blocks.1.linear2.weight") {
		t.Errorf("missing tensor: %v", err)
	}
	broken[dmPrefix+"single_blocks.1.linear2.weight"] = []int64{768, 100}
	if _, err := detectFlux(shapes(broken), nil); err == nil || !strings.Contains(err.Error(), "single_blocks.1.linear2.weight") {
		t.Errorf("misshapen tensor: %v", err)
	}
	// Heads that are not 128 wide need the axes in the metadata.
	narrow := map[string][]int64{}
	for _, ts := range synth.TinyFlux.Part("diffusion-model") {
		narrow[dmPrefix+ts.Name] = ts.Shape
	}
	for k := range narrow {
		if strings.HasSuffix(k, "_norm.scale") {
			narrow[k] = []int64{64}
		}
	}
	if _, err := detectFlux(shapes(narrow), nil); err == nil || !strings.Contains(err.Error(), MetaFluxAxes) {
		t.Errorf("64-wide heads without axes: %v", err)
	}
	// The schnell layout has no guidance_in.
	delete(sh, dmPrefix+"guidance_in.in_layer.weight")
	fam, err := DetectFamily(sh)
	if err != nil || fam.Name() != "flux-schnell" {
		t.Errorf("without guidance_in: family %v, %v", fam, err)
	}
}

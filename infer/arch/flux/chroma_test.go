//go:build cgo

package flux

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/native"
)

// Chroma's parts against plain-Go references in float64: the
// approximator with its input embedding, attention with the padding mask,
// the mask sd-cli builds; and the tiny model end to end.

// refTimestepEmbedding is ggml's sinusoidal embedding of t: cos then sin
// of t·10000^(-j/(dim/2)), the frequency and the angle rounded to float32
// as ggml's are (the index rows' angles reach 343000, where float32 keeps
// two decimals).
func refTimestepEmbedding(t float64, dim int) []float64 {
	half := dim / 2
	out := make([]float64, dim)
	for j := 0; j < half; j++ {
		f := float32(math.Exp(float64(-float32(math.Log(10000)) * float32(j) / float32(half))))
		a := float64(float32(t) * f)
		out[j], out[j+half] = math.Cos(a), math.Sin(a)
	}
	return out
}

func TestChromaApproximator(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(21, 22))
	const inner, hidden, layers = 16, 8, 2
	cfg := &ChromaConfig{FluxConfig: FluxConfig{Hidden: hidden}, ApproxIn: 64, ApproxInner: inner, ApproxLayers: layers}
	w := map[string]inferutil.TestWeight{}
	lin := func(name string, out, in int) {
		w[chromaApproxPrefix+name+".weight"] = inferutil.TestWeight{Shape: []int64{int64(out), int64(in)}, Typ: formats.F32, Data: inferutil.Randn(r, out*in, 1/math.Sqrt(float64(in)))}
		w[chromaApproxPrefix+name+".bias"] = inferutil.TestWeight{Shape: []int64{int64(out)}, Typ: formats.F32, Data: inferutil.Randn(r, out, 0.1)}
	}
	lin("in_proj", inner, 64)
	for i := 0; i < layers; i++ {
		lin(fmt.Sprintf("layers.%d.in_layer", i), inner, inner)
		lin(fmt.Sprintf("layers.%d.out_layer", i), inner, inner)
		w[fmt.Sprintf("%snorms.%d.scale", chromaApproxPrefix, i)] = inferutil.TestWeight{Shape: []int64{inner}, Typ: formats.F32, Data: inferutil.Randn(r, inner, 1)}
	}
	lin("out_proj", hidden, inner)
	ws := inferutil.MakeWeights(t, be, w)
	const tv = 0.625
	ts, gs, idx := make([]float32, chromaModRows), make([]float32, chromaModRows), make([]float32, chromaModRows)
	for i := range ts {
		ts[i], idx[i] = tv, float32(i)
	}
	n := int64(chromaModRows)
	got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{n}, Data: ts}, {Ne: []int64{n}, Data: gs}, {Ne: []int64{n}, Data: idx}},
		func(g *infer.Builder, in []native.Tensor) native.Tensor {
			return chromaApprox(g, cfg, chromaApproxInput(g, in[0], in[1], in[2]))
		})
	if ne != [4]int64{hidden, n, 1, 1} {
		t.Fatalf("output %v", ne)
	}
	get := func(name string) inferutil.TestWeight { return w[chromaApproxPrefix+name] }
	want := make([]float32, 0, chromaModRows*hidden)
	for row := 0; row < chromaModRows; row++ {
		x := append(append(refTimestepEmbedding(tv*1000, 16), refTimestepEmbedding(0, 16)...), refTimestepEmbedding(float64(row)*1000, 32)...)
		x = inferutil.RefLinear(get("in_proj.weight").Data, get("in_proj.bias").Data, x)
		for i := 0; i < layers; i++ {
			var ms float64
			for _, v := range x {
				ms += v * v
			}
			rms := math.Sqrt(ms/inner + FluxNormEps)
			nx := make([]float64, inner)
			for j, v := range x {
				nx[j] = v / rms * float64(get(fmt.Sprintf("norms.%d.scale", i)).Data[j])
			}
			l := fmt.Sprintf("layers.%d.", i)
			y := inferutil.RefLinear(get(l+"in_layer.weight").Data, get(l+"in_layer.bias").Data, nx)
			for j, v := range y {
				y[j] = v / (1 + math.Exp(-v))
			}
			y = inferutil.RefLinear(get(l+"out_layer.weight").Data, get(l+"out_layer.bias").Data, y)
			for j := range x {
				x[j] += y[j]
			}
		}
		for _, v := range inferutil.RefLinear(get("out_proj.weight").Data, get("out_proj.bias").Data, x) {
			want = append(want, float32(v))
		}
	}
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

func TestFluxAttentionMasked(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{})
	r := rand.New(rand.NewPCG(23, 24))
	const heads, d, txt, rows, cols = 2, 16, 4, 2, 2
	l := txt + rows*cols
	cos, sin := fluxRoPE([]int{4, 6, 6}, 10000, txt, rows, cols)
	q, k, v := inferutil.Randn(r, l*heads*d, 1), inferutil.Randn(r, l*heads*d, 1), inferutil.Randn(r, l*heads*d, 1)
	keep := []bool{true, true, false, false, true, true, true, true} // two padding tokens
	mask := make([]float32, l)
	for i, kp := range keep {
		if !kp {
			mask[i] = float32(math.Inf(-1))
		}
	}
	got, _ := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{
		{Ne: []int64{heads * d, int64(l)}, Data: q}, {Ne: []int64{heads * d, int64(l)}, Data: k}, {Ne: []int64{heads * d, int64(l)}, Data: v},
		{Ne: []int64{d / 2, int64(l)}, Data: cos}, {Ne: []int64{d / 2, int64(l)}, Data: sin}, {Ne: []int64{int64(l)}, Data: mask},
	}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
		h := func(x native.Tensor) native.Tensor { return g.Ctx.Reshape(x, d, heads, int64(l)) }
		return fluxAttentionMasked(g.Ctx, h(in[0]), h(in[1]), h(in[2]), in[3], in[4], in[5])
	})
	// The reference attends to the kept keys alone.
	qr, kr := inferutil.RefRotate(q, l, heads, d, cos, sin), inferutil.RefRotate(k, l, heads, d, cos, sin)
	var kk, vk []float32
	for i, kp := range keep {
		if kp {
			kk = append(kk, kr[i*heads*d:(i+1)*heads*d]...)
			vk = append(vk, v[i*heads*d:(i+1)*heads*d]...)
		}
	}
	want := inferutil.RefAttention(qr, kk, vk, heads*d, l, len(kk)/(heads*d), heads, 1, false)
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
	if e := inferutil.MaxRelErr(t, got, inferutil.RefAttention(qr, kr, v, heads*d, l, l, heads, 1, false)); e < 1e-3 {
		t.Errorf("masked attention matches unmasked attention (%g)", e)
	}
}

func TestChromaMask(t *testing.T) {
	inf := float32(math.Inf(-1))
	keep := []bool{true, true, true, false, false, false}
	for _, c := range []struct {
		pad  int
		want []float32
	}{
		{0, []float32{0, 0, 0, inf, inf, inf}},
		{1, []float32{0, 0, 0, 0, inf, inf}}, // sd-cli's default chroma_t5_mask_pad
		{8, []float32{0, 0, 0, 0, 0, 0}},
	} {
		got := chromaMask(keep, c.pad)
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("pad %d: %v, want %v", c.pad, got, c.want)
				break
			}
		}
	}
}

func TestDetectChroma(t *testing.T) {
	sh := map[string][]int64{}
	for _, ts := range synth.ChromaParity.Part("diffusion-model") {
		sh[infer.DmPrefix+ts.Name] = ts.Shape
	}
	c, err := detectChroma(infer.Shapes(sh), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hidden != 768 || c.Heads != 6 || c.Double != 2 || c.Single != 2 || c.VecDim != 0 || c.Guidance ||
		c.ApproxIn != 64 || c.ApproxInner != 5120 || c.ApproxLayers != 5 {
		t.Errorf("config %+v", c)
	}
	fam, err := infer.DetectFamily(sh)
	if err != nil || fam.Name() != "chroma" {
		t.Errorf("family %v, %v", fam, err)
	}
	// Flux's detection wants the modulation layers Chroma lacks.
	if _, err := detectFlux(infer.Shapes(sh), nil); err == nil || !strings.Contains(err.Error(), "mod.lin") {
		t.Errorf("Flux detection of Chroma: %v", err)
	}
	delete(sh, chromaApproxPrefix+"norms.3.scale")
	if _, err := detectChroma(infer.Shapes(sh), nil); err == nil || !strings.Contains(err.Error(), "norms.3.scale") {
		t.Errorf("missing norm: %v", err)
	}
}

// TestTinyChromaGenerates runs synth.TinyChroma (testdata/tiny-chroma.gguf)
// one step (the negative pass is the parity test's) and checks that the
// image is finite, the padding mask sd-cli's, and that the prompt reaches
// the context.
func TestTinyChromaGenerates(t *testing.T) {
	path := t.TempDir() + "/tiny-chroma.gguf"
	if err := synth.TinyChroma.WriteSingle(path); err != nil {
		t.Fatal(err)
	}
	m := inferutil.RenderTiny(t, path, "chroma")
	// The prompt and the empty negative prompt condition differently.
	pos, err := m.Encode("a cat", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	neg, err := m.Encode("", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	if pos.Tokens != 512 || len(pos.Vector) != 512 || pos.Vector[3] != 0 || !math.IsInf(float64(pos.Vector[4]), -1) {
		t.Errorf("%d tokens, mask %v...: want 512, \"a cat</s>\" and one pad unmasked", pos.Tokens, pos.Vector[:5])
	}
	if slices.Equal(pos.Context, neg.Context) {
		t.Error("the prompt's context equals the empty prompt's")
	}
	// sd-cli's model args: T5 masked inside, three pads visible to the DiT.
	args, err := infer.Load(infer.Components{"model": path}, infer.LoadOptions{Threads: 2, ModelArgs: map[string]string{"chroma_use_t5_mask": "true", "chroma_t5_mask_pad": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	defer args.Close()
	masked, err := args.Encode("a cat", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	if masked.Vector[5] != 0 || !math.IsInf(float64(masked.Vector[6]), -1) {
		t.Errorf("mask %v..., want three pads unmasked", masked.Vector[:7])
	}
	if slices.Equal(masked.Context[:3*64], pos.Context[:3*64]) {
		t.Error("T5's mask does not change the prompt's hidden states")
	}
}

func TestChromaModelArgs(t *testing.T) {
	c := &chromaConditioner{ditMask: true, maskPad: 1}
	if err := c.readArgs(map[string]string{"chroma_use_dit_mask": "false", "chroma_t5_mask_pad": "0", "other": "x"}); err != nil || c.ditMask || c.maskPad != 0 {
		t.Errorf("%+v, %v", c, err)
	}
	for _, bad := range []map[string]string{{"chroma_use_t5_mask": "yes"}, {"chroma_t5_mask_pad": "-1"}} {
		if err := c.readArgs(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

//go:build cgo

package infer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
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
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(21, 22))
	const inner, hidden, layers = 16, 8, 2
	cfg := &ChromaConfig{FluxConfig: FluxConfig{Hidden: hidden}, ApproxIn: 64, ApproxInner: inner, ApproxLayers: layers}
	w := map[string]testWeight{}
	lin := func(name string, out, in int) {
		w[chromaApproxPrefix+name+".weight"] = testWeight{shape: []int64{int64(out), int64(in)}, typ: formats.F32, data: randn(r, out*in, 1/math.Sqrt(float64(in)))}
		w[chromaApproxPrefix+name+".bias"] = testWeight{shape: []int64{int64(out)}, typ: formats.F32, data: randn(r, out, 0.1)}
	}
	lin("in_proj", inner, 64)
	for i := 0; i < layers; i++ {
		lin(fmt.Sprintf("layers.%d.in_layer", i), inner, inner)
		lin(fmt.Sprintf("layers.%d.out_layer", i), inner, inner)
		w[fmt.Sprintf("%snorms.%d.scale", chromaApproxPrefix, i)] = testWeight{shape: []int64{inner}, typ: formats.F32, data: randn(r, inner, 1)}
	}
	lin("out_proj", hidden, inner)
	ws := makeWeights(t, be, w)
	const tv = 0.625
	ts, gs, idx := make([]float32, chromaModRows), make([]float32, chromaModRows), make([]float32, chromaModRows)
	for i := range ts {
		ts[i], idx[i] = tv, float32(i)
	}
	n := int64(chromaModRows)
	got, ne := runGraph(t, be, ws, []testInput{{[]int64{n}, ts}, {[]int64{n}, gs}, {[]int64{n}, idx}},
		func(g *builder, in []native.Tensor) native.Tensor {
			return g.chromaApprox(cfg, g.chromaApproxInput(in[0], in[1], in[2]))
		})
	if ne != [4]int64{hidden, n, 1, 1} {
		t.Fatalf("output %v", ne)
	}
	get := func(name string) testWeight { return w[chromaApproxPrefix+name] }
	want := make([]float32, 0, chromaModRows*hidden)
	for row := 0; row < chromaModRows; row++ {
		x := append(append(refTimestepEmbedding(tv*1000, 16), refTimestepEmbedding(0, 16)...), refTimestepEmbedding(float64(row)*1000, 32)...)
		x = refLinear(get("in_proj.weight").data, get("in_proj.bias").data, x)
		for i := 0; i < layers; i++ {
			var ms float64
			for _, v := range x {
				ms += v * v
			}
			rms := math.Sqrt(ms/inner + fluxNormEps)
			nx := make([]float64, inner)
			for j, v := range x {
				nx[j] = v / rms * float64(get(fmt.Sprintf("norms.%d.scale", i)).data[j])
			}
			l := fmt.Sprintf("layers.%d.", i)
			y := refLinear(get(l+"in_layer.weight").data, get(l+"in_layer.bias").data, nx)
			for j, v := range y {
				y[j] = v / (1 + math.Exp(-v))
			}
			y = refLinear(get(l+"out_layer.weight").data, get(l+"out_layer.bias").data, y)
			for j := range x {
				x[j] += y[j]
			}
		}
		for _, v := range refLinear(get("out_proj.weight").data, get("out_proj.bias").data, x) {
			want = append(want, float32(v))
		}
	}
	if e := maxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

func TestFluxAttentionMasked(t *testing.T) {
	be := newTestBackend(t)
	ws := makeWeights(t, be, map[string]testWeight{})
	r := rand.New(rand.NewPCG(23, 24))
	const heads, d, txt, rows, cols = 2, 16, 4, 2, 2
	l := txt + rows*cols
	cos, sin := fluxRoPE([]int{4, 6, 6}, 10000, txt, rows, cols)
	q, k, v := randn(r, l*heads*d, 1), randn(r, l*heads*d, 1), randn(r, l*heads*d, 1)
	keep := []bool{true, true, false, false, true, true, true, true} // two padding tokens
	mask := make([]float32, l)
	for i, kp := range keep {
		if !kp {
			mask[i] = float32(math.Inf(-1))
		}
	}
	got, _ := runGraph(t, be, ws, []testInput{
		{[]int64{heads * d, int64(l)}, q}, {[]int64{heads * d, int64(l)}, k}, {[]int64{heads * d, int64(l)}, v},
		{[]int64{d / 2, int64(l)}, cos}, {[]int64{d / 2, int64(l)}, sin}, {[]int64{int64(l)}, mask},
	}, func(g *builder, in []native.Tensor) native.Tensor {
		h := func(x native.Tensor) native.Tensor { return g.c.Reshape(x, d, heads, int64(l)) }
		return fluxAttentionMasked(g.c, h(in[0]), h(in[1]), h(in[2]), in[3], in[4], in[5])
	})
	// The reference attends to the kept keys alone.
	qr, kr := refRotate(q, l, heads, d, cos, sin), refRotate(k, l, heads, d, cos, sin)
	var kk, vk []float32
	for i, kp := range keep {
		if kp {
			kk = append(kk, kr[i*heads*d:(i+1)*heads*d]...)
			vk = append(vk, v[i*heads*d:(i+1)*heads*d]...)
		}
	}
	want := refAttention(qr, kk, vk, heads*d, l, len(kk)/(heads*d), heads, 1, false)
	if e := maxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
	if e := maxRelErr(t, got, refAttention(qr, kr, v, heads*d, l, l, heads, 1, false)); e < 1e-3 {
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
		sh[dmPrefix+ts.Name] = ts.Shape
	}
	c, err := detectChroma(shapes(sh), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hidden != 768 || c.Heads != 6 || c.Double != 2 || c.Single != 2 || c.VecDim != 0 || c.Guidance ||
		c.ApproxIn != 64 || c.ApproxInner != 5120 || c.ApproxLayers != 5 {
		t.Errorf("config %+v", c)
	}
	fam, err := DetectFamily(sh)
	if err != nil || fam.Name() != "chroma" {
		t.Errorf("family %v, %v", fam, err)
	}
	// Flux's detection wants the modulation layers Chroma lacks.
	if _, err := detectFlux(shapes(sh), nil); err == nil || !strings.Contains(err.Error(), "mod.lin") {
		t.Errorf("Flux detection of Chroma: %v", err)
	}
	delete(sh, chromaApproxPrefix+"norms.3.scale")
	if _, err := detectChroma(shapes(sh), nil); err == nil || !strings.Contains(err.Error(), "norms.3.scale") {
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
	m := renderTiny(t, path, "chroma")
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
	args, err := Load(Components{"model": path}, LoadOptions{Threads: 2, ModelArgs: map[string]string{"chroma_use_t5_mask": "true", "chroma_t5_mask_pad": "3"}})
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

//go:build cgo

package t5

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/native"
)

// The T5 encoder against a plain-Go float64 reference written from T5's
// definition (Hugging Face's T5EncoderModel, v1.1 configuration), on tiny
// random weights.

// t5TestSizes are a tiny T5: 3 layers, width 32, 4 heads of 8, FF 64, 40 tokens, 32 buckets.
var t5TestSizes = T5Config{Vocab: 40, Hidden: 32, FF: 64, Layers: 3, Heads: 4, HeadDim: 8, Buckets: 32, MaxDistance: 128}

// t5TestWeights makes random weights of cfg under prefix, in HF names and PyTorch shapes;
// linear weights are of type lin.
func t5TestWeights(r *rand.Rand, cfg T5Config, prefix string, lin formats.DType) map[string]inferutil.TestWeight {
	h, ff, inner := int64(cfg.Hidden), int64(cfg.FF), int64(cfg.Inner())
	w := map[string]inferutil.TestWeight{}
	add := func(name string, typ formats.DType, std float64, offset float32, shape ...int64) {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		d := inferutil.Randn(r, int(n), std)
		for i := range d {
			d[i] += offset
		}
		w[prefix+name] = inferutil.TestWeight{Shape: shape, Typ: typ, Data: d}
	}
	add("shared.weight", formats.F32, 1, 0, int64(cfg.Vocab), h)
	add("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", formats.F32, 1, 0, int64(cfg.Buckets), int64(cfg.Heads))
	for i := 0; i < cfg.Layers; i++ {
		b := fmt.Sprintf("encoder.block.%d.layer.", i)
		if cfg.LayerBias && i > 0 {
			add(b+"0.SelfAttention.relative_attention_bias.weight", formats.F32, 1, 0, int64(cfg.Buckets), int64(cfg.Heads))
		}
		add(b+"0.layer_norm.weight", formats.F32, 0.2, 1, h)
		for _, p := range []string{"q", "k", "v"} {
			add(b+"0.SelfAttention."+p+".weight", lin, 0.3, 0, inner, h)
		}
		add(b+"0.SelfAttention.o.weight", lin, 0.3, 0, h, inner)
		add(b+"1.layer_norm.weight", formats.F32, 0.2, 1, h)
		add(b+"1.DenseReluDense.wi_0.weight", lin, 0.3, 0, ff, h)
		add(b+"1.DenseReluDense.wi_1.weight", lin, 0.3, 0, ff, h)
		add(b+"1.DenseReluDense.wo.weight", lin, 0.3, 0, h, ff)
	}
	add("encoder.final_layer_norm.weight", formats.F32, 0.2, 1, h)
	return w
}

// refT5 is the reference encoder: ids to hidden states [L][Hidden] after
// the final norm, with every weight as stored (its encoded values).
func refT5(t *testing.T, w map[string]inferutil.TestWeight, cfg T5Config, prefix string, ids []int32, mask []bool) []float32 {
	t.Helper()
	get := func(name string) []float32 { return inferutil.Stored(t, w[prefix+name]) }
	hd, ff, inner, nh, dk := cfg.Hidden, cfg.FF, cfg.Inner(), cfg.Heads, cfg.HeadDim
	l := len(ids)
	emb := get("shared.weight")
	x := make([][]float64, l)
	for i, id := range ids {
		x[i] = make([]float64, hd)
		for j := range x[i] {
			x[i][j] = float64(emb[int(id)*hd+j])
		}
	}
	rms := func(v []float64, scale []float32) []float64 {
		var s float64
		for _, a := range v {
			s += a * a
		}
		r := 1 / math.Sqrt(s/float64(len(v))+1e-6)
		out := make([]float64, len(v))
		for i, a := range v {
			out[i] = a * r * float64(scale[i])
		}
		return out
	}
	lin := func(v []float64, wt []float32, out int) []float64 {
		in := len(v)
		y := make([]float64, out)
		for o := range y {
			for j := 0; j < in; j++ {
				y[o] += float64(wt[o*in+j]) * v[j]
			}
		}
		return y
	}
	// The bias the reference derives itself: buckets by the float64 rule,
	// rows of layer 0's table (each layer's own for UMT5), one value per
	// (head, query, key).
	relTab := get("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
	bucket := func(rel int) int {
		half := cfg.Buckets / 2
		base := 0
		if rel > 0 {
			base = half
		}
		a := math.Abs(float64(rel))
		exact := half / 2
		if int(a) < exact {
			return base + int(a)
		}
		v := exact + int(math.Log(a/float64(exact))/math.Log(float64(cfg.MaxDistance)/float64(exact))*float64(half-exact))
		return base + min(v, half-1)
	}
	for layer := 0; layer < cfg.Layers; layer++ {
		b := fmt.Sprintf("encoder.block.%d.layer.", layer)
		if cfg.LayerBias {
			relTab = get(b + "0.SelfAttention.relative_attention_bias.weight")
		}
		q, k, v := make([][]float64, l), make([][]float64, l), make([][]float64, l)
		for i := range x {
			h := rms(x[i], get(b+"0.layer_norm.weight"))
			q[i] = lin(h, get(b+"0.SelfAttention.q.weight"), inner)
			k[i] = lin(h, get(b+"0.SelfAttention.k.weight"), inner)
			v[i] = lin(h, get(b+"0.SelfAttention.v.weight"), inner)
		}
		wo := get(b + "0.SelfAttention.o.weight")
		for i := range x {
			att := make([]float64, inner)
			for head := 0; head < nh; head++ {
				s := make([]float64, l)
				mx := math.Inf(-1)
				for j := 0; j < l; j++ {
					if mask != nil && !mask[j] {
						s[j] = math.Inf(-1)
						continue
					}
					for d := 0; d < dk; d++ {
						s[j] += q[i][head*dk+d] * k[j][head*dk+d]
					}
					s[j] += float64(relTab[bucket(j-i)*nh+head])
					mx = math.Max(mx, s[j])
				}
				var z float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					z += s[j]
				}
				for j := range s {
					for d := 0; d < dk; d++ {
						att[head*dk+d] += s[j] / z * v[j][head*dk+d]
					}
				}
			}
			o := lin(att, wo, hd)
			for j := range x[i] {
				x[i][j] += o[j]
			}
		}
		for i := range x {
			h := rms(x[i], get(b+"1.layer_norm.weight"))
			g := lin(h, get(b+"1.DenseReluDense.wi_0.weight"), ff)
			u := lin(h, get(b+"1.DenseReluDense.wi_1.weight"), ff)
			for j := range g {
				g[j] = inferutil.GELUTanh(g[j]) * u[j]
			}
			o := lin(g, get(b+"1.DenseReluDense.wo.weight"), hd)
			for j := range x[i] {
				x[i][j] += o[j]
			}
		}
	}
	out := make([]float32, 0, l*hd)
	for i := range x {
		for _, a := range rms(x[i], get("encoder.final_layer_norm.weight")) {
			out = append(out, float32(a))
		}
	}
	return out
}

// t5TestModel is a Model holding only the given weights, enough for EncodeT5.
func t5TestModel(t *testing.T, w map[string]inferutil.TestWeight, cfg *T5Config) *infer.Model {
	t.Helper()
	be, err := native.NewCPUBackend(1) // one thread: see model_test.go
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Free)
	ws := inferutil.MakeWeights(t, be, w)
	alloc := be.NewAllocator()
	t.Cleanup(alloc.Free)
	return &infer.Model{Path: "t5 test", Config: &infer.ModelConfig{Encoders: []infer.EncoderConfig{cfg}}, Backend: be, Weights: ws, Alloc: alloc}
}

func TestT5EncoderMatchesReference(t *testing.T) {
	for _, c := range []struct {
		name   string
		layers int
		lin    formats.DType
		n      int
		mask   bool
		umt5   bool // a bias table in every layer
		tol    float64
	}{
		// ggml's GELU reads a table indexed by the f16 rounding of its input,
		// which bounds the f32 agreement at a few 1e-3.
		{"one layer f32", 1, formats.F32, 7, false, false, 5e-3},
		{"three layers f32", 3, formats.F32, 20, false, false, 5e-3},
		// Past 16 tokens apart the buckets turn logarithmic: 150 tokens use all 32.
		{"three layers f32 150 tokens", 3, formats.F32, 150, false, false, 5e-3},
		{"three layers f32 masked", 3, formats.F32, 12, true, false, 5e-3},
		{"umt5 three layers f32 masked", 3, formats.F32, 40, true, true, 5e-3},
		// f16 and q8_0 weights: ggml rounds the activations to f16 or q8_0 too,
		// and the unscaled attention scores amplify q8_0's rounding.
		{"three layers f16", 3, formats.F16, 20, false, false, 1e-2},
		{"umt5 two layers f16", 2, formats.F16, 20, false, true, 1e-2},
		{"one layer q8_0", 1, formats.Q8_0, 20, false, false, 8e-2},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(13, uint64(c.n*10+c.layers)))
			cfg := t5TestSizes
			cfg.Layers = c.layers
			cfg.LayerBias = c.umt5
			cfg.Prefix = T5Prefix
			cfg.Embedding = T5Prefix + "shared.weight"
			w := t5TestWeights(r, cfg, T5Prefix, c.lin)
			m := t5TestModel(t, w, &cfg)
			ids := make([]int32, c.n)
			for i := range ids {
				ids[i] = int32(r.IntN(cfg.Vocab))
			}
			var mask []bool
			if c.mask {
				mask = make([]bool, c.n)
				for i := range mask {
					mask[i] = i < c.n-4 // the last 4 are padding
				}
			}
			got, err := EncodeT5(m, ids, mask)
			if err != nil {
				t.Fatal(err)
			}
			want := refT5(t, w, cfg, T5Prefix, ids, mask)
			e := inferutil.MaxRelErr(t, got, want)
			if e > c.tol {
				t.Errorf("relative error %g > %g", e, c.tol)
			}
			t.Logf("relative error %.3g", e)
		})
	}
}

// TestT5ReferenceIsSensitive guards the reference comparison: an encoder
// with the attention scaled by 1/√d, or with the bias of the wrong sign of
// relative position, must not pass it.
func TestT5ReferenceIsSensitive(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	cfg := t5TestSizes
	cfg.Layers = 1
	cfg.Prefix = T5Prefix
	cfg.Embedding = T5Prefix + "shared.weight"
	w := t5TestWeights(r, cfg, T5Prefix, formats.F32)
	m := t5TestModel(t, w, &cfg)
	ids := []int32{3, 9, 1, 27, 5, 5, 12, 0, 33}
	got, err := EncodeT5(m, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Mirror the bias table (bucket b of keys before the query is b+16 of
	// keys after it): the encoder then sees key−query reversed.
	rel := T5Prefix + "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
	tw := w[rel]
	flipped := make([]float32, len(tw.Data))
	for b := 0; b < 32; b++ {
		copy(flipped[((b+16)%32)*cfg.Heads:], tw.Data[b*cfg.Heads:(b+1)*cfg.Heads])
	}
	w2 := map[string]inferutil.TestWeight{}
	for k, v := range w {
		w2[k] = v
	}
	w2[rel] = inferutil.TestWeight{Shape: tw.Shape, Typ: tw.Typ, Data: flipped}
	if e := inferutil.MaxRelErr(t, got, refT5(t, w2, cfg, T5Prefix, ids, nil)); e < 2e-2 {
		t.Errorf("a mirrored bias gives relative error %g, too close to tell", e)
	} else {
		t.Logf("mirrored bias: relative error %.3g", e)
	}
}

func TestT5EncodeErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	cfg := t5TestSizes
	cfg.Layers = 1
	cfg.Prefix = T5Prefix
	cfg.Embedding = T5Prefix + "shared.weight"
	w := t5TestWeights(r, cfg, T5Prefix, formats.F32)
	m := t5TestModel(t, w, &cfg)
	for _, c := range []struct {
		ids  []int32
		mask []bool
	}{{nil, nil}, {[]int32{1, 40}, nil}, {[]int32{-1}, nil}, {[]int32{1, 2}, []bool{true}}} {
		if _, err := EncodeT5(m, c.ids, c.mask); err == nil {
			t.Errorf("ids %v mask %v: no error", c.ids, c.mask)
		}
	}
	delete(m.Weights.ByName, T5Prefix+"encoder.final_layer_norm.weight")
	if _, err := EncodeT5(m, []int32{1}, nil); err == nil {
		t.Error("missing final norm: no error")
	}
}

// TestUMT5LayerBiasMatters guards the per-layer bias: UMT5 weights run as
// T5 v1.1 (layer 0's table shared) must not pass the UMT5 reference.
func TestUMT5LayerBiasMatters(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	cfg := t5TestSizes
	cfg.Layers, cfg.LayerBias = 2, true
	cfg.Prefix, cfg.Embedding = T5Prefix, T5Prefix+"shared.weight"
	w := t5TestWeights(r, cfg, T5Prefix, formats.F32)
	shared := cfg
	shared.LayerBias = false
	m := t5TestModel(t, w, &shared)
	ids := []int32{3, 9, 1, 27, 5, 5, 12, 0, 33}
	got, err := EncodeT5(m, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := inferutil.MaxRelErr(t, got, refT5(t, w, cfg, T5Prefix, ids, nil)); e < 2e-2 {
		t.Errorf("a shared bias gives relative error %g against UMT5, too close to tell", e)
	}
}

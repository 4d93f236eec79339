//go:build cgo

package llm

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/native"
)

// The LLM text encoder against a plain-Go float64 reference written from
// Hugging Face's Qwen3 and Qwen2 modelling code (RMSNorm, rotate_half
// rotary embeddings, repeat_kv grouped-query attention with a causal mask,
// SwiGLU), on tiny random weights.

// llmTestConfig is a tiny LLM: width 64, 4 query heads of 16 sharing 2
// key/value heads, MLP 96, vocabulary 50 (widths q8_0 blocks divide).
func llmTestConfig(arch string, layers int) LLMConfig {
	c := LLMConfig{Component: "llm", Prefix: LLMPrefix, Arch: LLMArchs[arch], Vocab: 50, Hidden: 64, FF: 96, Layers: layers,
		Heads: 4, KVHeads: 2, HeadDim: 16, FinalNorm: true}
	c.QKNorm = arch == "qwen3"
	c.QKVBias = arch == "qwen2.5-vl"
	return c
}

// llmTestWeights makes random weights of cfg in HF names and PyTorch
// shapes; linear weights are of type lin.
func llmTestWeights(r *rand.Rand, cfg LLMConfig, lin formats.DType) map[string]inferutil.TestWeight {
	h, q, kv, ff := int64(cfg.Hidden), int64(cfg.Heads*cfg.HeadDim), int64(cfg.KVHeads*cfg.HeadDim), int64(cfg.FF)
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
		w[cfg.Prefix+name] = inferutil.TestWeight{Shape: shape, Typ: typ, Data: d}
	}
	add("embed_tokens.weight", formats.F32, 1, 0, int64(cfg.Vocab), h)
	for i := 0; i < cfg.Layers; i++ {
		p := "layers." + strconv.Itoa(i) + "."
		add(p+"input_layernorm.weight", formats.F32, 0.2, 1, h)
		add(p+"post_attention_layernorm.weight", formats.F32, 0.2, 1, h)
		add(p+"self_attn.q_proj.weight", lin, 0.3, 0, q, h)
		add(p+"self_attn.k_proj.weight", lin, 0.3, 0, kv, h)
		add(p+"self_attn.v_proj.weight", lin, 0.3, 0, kv, h)
		add(p+"self_attn.o_proj.weight", lin, 0.3, 0, h, q)
		if cfg.QKVBias {
			add(p+"self_attn.q_proj.bias", formats.F32, 0.5, 0, q)
			add(p+"self_attn.k_proj.bias", formats.F32, 0.5, 0, kv)
			add(p+"self_attn.v_proj.bias", formats.F32, 0.5, 0, kv)
		}
		if cfg.QKNorm {
			add(p+"self_attn.q_norm.weight", formats.F32, 0.2, 1, int64(cfg.HeadDim))
			add(p+"self_attn.k_norm.weight", formats.F32, 0.2, 1, int64(cfg.HeadDim))
		}
		add(p+"mlp.gate_proj.weight", lin, 0.3, 0, ff, h)
		add(p+"mlp.up_proj.weight", lin, 0.3, 0, ff, h)
		add(p+"mlp.down_proj.weight", lin, 0.3, 0, h, ff)
	}
	add("norm.weight", formats.F32, 0.2, 1, h)
	return w
}

// refLLM is the reference: ids to the hidden states layer selects, rows of
// Hidden, with every weight as stored.
func refLLM(t *testing.T, w map[string]inferutil.TestWeight, cfg LLMConfig, ids []int32, layer int) []float32 {
	t.Helper()
	return refLLMLayers(t, w, cfg, ids, nil, []int{layer})
}

// refLLMLayers is refLLM reading several layers (concatenated per token,
// ascending; Layers+1 is the final norm's output, and no selected layer
// means that alone), with the keys whose keep is false hidden from every
// query (keep nil: none).
func refLLMLayers(t *testing.T, w map[string]inferutil.TestWeight, cfg LLMConfig, ids []int32, keep []bool, layers []int) []float32 {
	t.Helper()
	get := func(name string) []float32 { return inferutil.Stored(t, w[cfg.Prefix+name]) }
	eps := float64(cfg.Arch.Eps)
	hd, dh, nh, nkv := cfg.Hidden, cfg.HeadDim, cfg.Heads, cfg.KVHeads
	l := len(ids)
	rms := func(v []float64, scale []float32) []float64 {
		var s float64
		for _, a := range v {
			s += a * a
		}
		r := 1 / math.Sqrt(s/float64(len(v))+eps)
		out := make([]float64, len(v))
		for i, a := range v {
			out[i] = a * r * float64(scale[i])
		}
		return out
	}
	lin := func(v []float64, name string, out int) []float64 {
		wt := get(name + ".weight")
		var b []float32
		if _, ok := w[cfg.Prefix+name+".bias"]; ok {
			b = get(name + ".bias")
		}
		y := make([]float64, out)
		for o := range y {
			for j, x := range v {
				y[o] += float64(wt[o*len(v)+j]) * x
			}
			if b != nil {
				y[o] += float64(b[o])
			}
		}
		return y
	}
	// rotate applies rotate_half's rotary embedding to one head at position pos.
	rotate := func(x []float64, pos int) {
		half := dh / 2
		for i := 0; i < half; i++ {
			th := float64(pos) * math.Pow(float64(cfg.Arch.RopeTheta), -2*float64(i)/float64(dh))
			c, s := math.Cos(th), math.Sin(th)
			a, b := x[i], x[i+half]
			x[i], x[i+half] = a*c-b*s, b*c+a*s
		}
	}
	emb := get("embed_tokens.weight")
	x := make([][]float64, l)
	for i, id := range ids {
		x[i] = make([]float64, hd)
		for j := range x[i] {
			x[i][j] = float64(emb[int(id)*hd+j])
		}
	}
	sel := map[int]bool{}
	for _, l := range layers {
		if l >= 1 && l <= cfg.Layers+1 {
			sel[l] = true
		}
	}
	norm := sel[cfg.Layers+1] || len(sel) == 0
	rows := make([][]float64, l) // the selected states of each token, concatenated
	for li := 0; li < cfg.Layers; li++ {
		p := "layers." + strconv.Itoa(li) + "."
		q, k, v := make([][]float64, l), make([][]float64, l), make([][]float64, l)
		for i := range x {
			h := rms(x[i], get(p+"input_layernorm.weight"))
			q[i] = lin(h, p+"self_attn.q_proj", nh*dh)
			k[i] = lin(h, p+"self_attn.k_proj", nkv*dh)
			v[i] = lin(h, p+"self_attn.v_proj", nkv*dh)
			for hh := 0; hh < nh; hh++ {
				head := q[i][hh*dh : (hh+1)*dh]
				if cfg.QKNorm {
					copy(head, rms(head, get(p+"self_attn.q_norm.weight")))
				}
				rotate(head, i)
			}
			for hh := 0; hh < nkv; hh++ {
				head := k[i][hh*dh : (hh+1)*dh]
				if cfg.QKNorm {
					copy(head, rms(head, get(p+"self_attn.k_norm.weight")))
				}
				rotate(head, i)
			}
		}
		next := make([][]float64, l)
		for i := range x {
			att := make([]float64, nh*dh)
			for hh := 0; hh < nh; hh++ {
				kvh := hh / (nh / nkv)
				s := make([]float64, i+1) // causal: keys 0..i
				mx := math.Inf(-1)
				for j := range s {
					if keep != nil && !keep[j] {
						s[j] = math.Inf(-1)
						continue
					}
					for d := 0; d < dh; d++ {
						s[j] += q[i][hh*dh+d] * k[j][kvh*dh+d]
					}
					s[j] /= math.Sqrt(float64(dh))
					mx = math.Max(mx, s[j])
				}
				var z float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					z += s[j]
				}
				for j := range s {
					for d := 0; d < dh; d++ {
						att[hh*dh+d] += s[j] / z * v[j][kvh*dh+d]
					}
				}
			}
			o := lin(att, p+"self_attn.o_proj", hd)
			next[i] = make([]float64, hd)
			for j := range o {
				next[i][j] = x[i][j] + o[j]
			}
			h := rms(next[i], get(p+"post_attention_layernorm.weight"))
			g := lin(h, p+"mlp.gate_proj", cfg.FF)
			u := lin(h, p+"mlp.up_proj", cfg.FF)
			for j := range g {
				g[j] = g[j] / (1 + math.Exp(-g[j])) * u[j]
			}
			d := lin(g, p+"mlp.down_proj", hd)
			for j := range d {
				next[i][j] += d[j]
			}
		}
		x = next
		if sel[li+1] {
			for i := range x {
				rows[i] = append(rows[i], x[i]...)
			}
		}
	}
	var out []float32
	for i := range x {
		if norm {
			rows[i] = append(rows[i], rms(x[i], get("norm.weight"))...)
		}
		for _, a := range rows[i] {
			out = append(out, float32(a))
		}
	}
	return out
}

// llmTestModel is a Model holding only the given weights, enough for EncodeLLM.
func llmTestModel(t *testing.T, w map[string]inferutil.TestWeight, cfg *LLMConfig) *infer.Model {
	t.Helper()
	be, err := native.NewCPUBackend(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Free)
	ws := inferutil.MakeWeights(t, be, w)
	alloc := be.NewAllocator()
	t.Cleanup(alloc.Free)
	return &infer.Model{Path: "llm test", Config: &infer.ModelConfig{Encoders: []infer.EncoderConfig{cfg}}, Backend: be, Weights: ws, Alloc: alloc}
}

func TestLLMEncoderMatchesReference(t *testing.T) {
	for _, c := range []struct {
		name          string
		arch          string
		layers, layer int
		lin           formats.DType
		n             int
		tol           float64
	}{
		{"qwen3 one layer", "qwen3", 1, 0, formats.F32, 7, 1e-4},
		{"qwen3 three layers, final norm", "qwen3", 3, 0, formats.F32, 19, 1e-4},
		{"qwen3 layer 2 of 3 (no final norm)", "qwen3", 3, 2, formats.F32, 19, 1e-4},
		{"qwen3 layer past the depth (final norm)", "qwen3", 2, 35, formats.F32, 9, 1e-4},
		{"qwen2.5-vl three layers", "qwen2.5-vl", 3, 0, formats.F32, 23, 1e-4},
		// f16 and q8_0 weights: ggml rounds the activations to f16 or q8_0 too,
		// and two layers of random weights compound q8_0's rounding (T5 needs 8e-2).
		{"qwen3 two layers f16", "qwen3", 2, 0, formats.F16, 16, 5e-3},
		{"qwen2.5-vl two layers q8_0", "qwen2.5-vl", 2, 0, formats.Q8_0, 16, 1e-1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(c.n*10+c.layers)))
			cfg := llmTestConfig(c.arch, c.layers)
			w := llmTestWeights(r, cfg, c.lin)
			m := llmTestModel(t, w, &cfg)
			ids := make([]int32, c.n)
			for i := range ids {
				ids[i] = int32(r.IntN(cfg.Vocab))
			}
			got, err := EncodeLLM(m, ids, c.layer)
			if err != nil {
				t.Fatal(err)
			}
			e := inferutil.MaxRelErr(t, got, refLLM(t, w, cfg, ids, c.layer))
			if e > c.tol {
				t.Errorf("relative error %g > %g", e, c.tol)
			}
			t.Logf("relative error %.3g", e)
		})
	}
}

// TestLLMReferenceIsSensitive guards the comparison: adjacent-pair rotary
// embeddings (Mistral's) instead of Qwen's, or a key/value head grouping
// other than repeat_kv's, must not pass it, and the causal mask must keep
// a token's hidden states independent of the tokens after it.
func TestLLMReferenceIsSensitive(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cfg := llmTestConfig("qwen3", 1)
	w := llmTestWeights(r, cfg, formats.F32)
	ids := []int32{3, 9, 1, 27, 5, 5, 12, 0, 33}
	want := refLLM(t, w, cfg, ids, 0)

	normal := cfg
	normal.Arch.RopeMode = native.RopeNormal
	got, err := EncodeLLM(llmTestModel(t, w, &normal), ids, 0)
	if err != nil {
		t.Fatal(err)
	}
	if e := inferutil.MaxRelErr(t, got, want); e < 1e-2 {
		t.Errorf("adjacent-pair rotation passes the reference (relative error %g)", e)
	}

	// Swap the two key heads: query heads then read the other group.
	swapped := map[string]inferutil.TestWeight{}
	for k, v := range w {
		swapped[k] = v
	}
	for _, name := range []string{"self_attn.k_proj.weight", "self_attn.v_proj.weight"} {
		tw := w[cfg.Prefix+"layers.0."+name]
		d := make([]float32, len(tw.Data))
		half := len(d) / 2
		copy(d, tw.Data[half:])
		copy(d[half:], tw.Data[:half])
		swapped[cfg.Prefix+"layers.0."+name] = inferutil.TestWeight{Shape: tw.Shape, Typ: tw.Typ, Data: d}
	}
	got, err = EncodeLLM(llmTestModel(t, swapped, &cfg), ids, 0)
	if err != nil {
		t.Fatal(err)
	}
	if e := inferutil.MaxRelErr(t, got, want); e < 1e-2 {
		t.Errorf("swapped key/value heads pass the reference (relative error %g)", e)
	}

	m := llmTestModel(t, w, &cfg)
	a, err := EncodeLLM(m, ids, 0)
	if err != nil {
		t.Fatal(err)
	}
	changed := append([]int32(nil), ids...)
	changed[len(changed)-1] = 40
	b, err := EncodeLLM(m, changed, 0)
	if err != nil {
		t.Fatal(err)
	}
	keep := (len(ids) - 1) * cfg.Hidden
	if e := inferutil.MaxRelErr(t, b[:keep], a[:keep]); e != 0 {
		t.Errorf("changing the last token changed earlier hidden states (relative %g): no causal mask", e)
	}
	if e := inferutil.MaxRelErr(t, b[keep:], a[keep:]); e == 0 {
		t.Error("changing the last token left its hidden states unchanged")
	}
}

// TestQwen25VLRopeIsNeoxForText checks the claim the "qwen2.5-vl"
// architecture rests on: sd.cpp rotates Qwen2.5-VL's queries and keys with
// ggml's multimodal rotation (sections 16, 24, 24 of the 64 pairs, theta
// 1e6), and for text, whose three position rows are equal, that is the
// ordinary NeoX rotation the graph uses. Image-like positions (rows that
// differ) must not give the same result, or the check proves nothing.
func TestQwen25VLRopeIsNeoxForText(t *testing.T) {
	const d, heads, l = 128, 3, 9
	r := rand.New(rand.NewPCG(5, 6))
	x := inferutil.Randn(r, d*heads*l, 1)
	m := llmTestModel(t, map[string]inferutil.TestWeight{}, &LLMConfig{})
	rotate := func(multi bool, hShift int32) []float32 {
		pos := make([]int32, l)
		for i := range pos {
			pos[i] = int32(i)
		}
		if multi {
			p4 := make([]int32, 4*l)
			for i := 0; i < l; i++ {
				p4[i], p4[l+i], p4[2*l+i] = int32(i), int32(i)+hShift, int32(i)
			}
			pos = p4
		}
		var out []float32
		err := m.Compute(func(g *infer.Builder) ([]infer.Input, native.Tensor) {
			xt := infer.NewInput(g, formats.F32, d, heads, l)
			pt := infer.NewInput(g, formats.I32, int64(len(pos)))
			var y native.Tensor
			if multi {
				y = g.Ctx.RopeMulti(xt, pt, d, [4]int{16, 24, 24, 0}, 1e6)
			} else {
				y = g.Ctx.Rope(xt, pt, d, native.RopeNeox, 1e6)
			}
			return []infer.Input{{T: xt, F32: x}, {T: pt, I32: pos}}, y
		}, func(o native.Tensor) error {
			var err error
			out, err = o.F32()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	neox := rotate(false, 0)
	if e := inferutil.MaxRelErr(t, rotate(true, 0), neox); e > 1e-6 {
		t.Errorf("multimodal rotation of text positions differs from NeoX's by %g", e)
	}
	if e := inferutil.MaxRelErr(t, rotate(true, 3), neox); e < 1e-3 {
		t.Errorf("image-like positions give NeoX's rotation too (%g): the comparison cannot fail", e)
	}
}

// TestLLMLayersAndPadding checks several layers read at once (Flux.2
// klein's out layers) and padding keys hidden from every query against the
// reference.
func TestLLMLayersAndPadding(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	cfg := llmTestConfig("qwen3", 3)
	w := llmTestWeights(r, cfg, formats.F32)
	m := llmTestModel(t, w, &cfg)
	ids := []int32{4, 8, 15, 16, 23, 42, 0, 0, 0, 0}
	keep := []bool{true, true, true, true, true, true, false, false, false, false}
	for _, layers := range [][]int{{1, 3}, {2, 4}, {3, 1, 2}} {
		got, err := encodeLLM(m, ids, keep, layers)
		if err != nil {
			t.Fatal(err)
		}
		want := refLLMLayers(t, w, cfg, ids, keep, layers)
		if e := inferutil.MaxRelErr(t, got, want); e > 1e-4 {
			t.Errorf("layers %v: relative error %g", layers, e)
		}
	}
	// The mask matters only to the padding's own rows (the causal mask
	// already hides it from the tokens before it).
	masked, _ := encodeLLM(m, ids, keep, []int{4})
	open, err := encodeLLM(m, ids, nil, []int{4})
	if err != nil {
		t.Fatal(err)
	}
	real := 6 * cfg.Hidden
	if e := inferutil.MaxRelErr(t, masked[:real], open[:real]); e != 0 {
		t.Errorf("the padding mask changed the tokens before it (relative %g)", e)
	}
	if e := inferutil.MaxRelErr(t, masked[real:], open[real:]); e < 1e-3 {
		t.Errorf("the padding mask changed nothing (relative %g)", e)
	}
}

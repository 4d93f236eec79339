//go:build cgo

package infer

import (
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// OpenCLIP's fused in_proj gives the same text encoder output as the same
// weights split into q_proj, k_proj and v_proj.
func TestCLIPFusedQKVMatchesSplit(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(15, 16))
	const h, ff, vocab, pos = 32, 64, 20, 8
	p := clipPrefix
	l := p + "encoder.layers.0."
	common := map[string]testWeight{
		p + "embeddings.token_embedding.weight":    {shape: []int64{vocab, h}, typ: formats.F32, data: randn(r, vocab*h, 1)},
		p + "embeddings.position_embedding.weight": {shape: []int64{pos, h}, typ: formats.F32, data: randn(r, pos*h, 0.1)},
		l + "self_attn.out_proj.weight":            {shape: []int64{h, h}, typ: formats.F32, data: randn(r, h*h, 0.2)},
		l + "self_attn.out_proj.bias":              {shape: []int64{h}, typ: formats.F32, data: randn(r, h, 0.1)},
		l + "mlp.fc1.weight":                       {shape: []int64{ff, h}, typ: formats.F32, data: randn(r, ff*h, 0.2)},
		l + "mlp.fc1.bias":                         {shape: []int64{ff}, typ: formats.F32, data: randn(r, ff, 0.1)},
		l + "mlp.fc2.weight":                       {shape: []int64{h, ff}, typ: formats.F32, data: randn(r, ff*h, 0.2)},
		l + "mlp.fc2.bias":                         {shape: []int64{h}, typ: formats.F32, data: randn(r, h, 0.1)},
	}
	for _, n := range []string{l + "layer_norm1", l + "layer_norm2", p + "final_layer_norm"} {
		common[n+".weight"] = testWeight{shape: []int64{h}, typ: formats.F32, data: randn(r, h, 1)}
		common[n+".bias"] = testWeight{shape: []int64{h}, typ: formats.F32, data: randn(r, h, 0.1)}
	}
	qkvW, qkvB := randn(r, 3*h*h, 0.3), randn(r, 3*h, 0.1)
	fused := map[string]testWeight{
		l + "self_attn.in_proj.weight": {shape: []int64{3 * h, h}, typ: formats.F32, data: qkvW},
		l + "self_attn.in_proj.bias":   {shape: []int64{3 * h}, typ: formats.F32, data: qkvB},
	}
	split := map[string]testWeight{}
	for i, n := range []string{"q_proj", "k_proj", "v_proj"} {
		split[l+"self_attn."+n+".weight"] = testWeight{shape: []int64{h, h}, typ: formats.F32, data: qkvW[i*h*h : (i+1)*h*h]}
		split[l+"self_attn."+n+".bias"] = testWeight{shape: []int64{h}, typ: formats.F32, data: qkvB[i*h : (i+1)*h]}
	}
	for k, v := range common {
		fused[k], split[k] = v, v
	}
	ids := []int32{0, 5, 7, 19, 3, 19}
	run := func(w map[string]testWeight, cfg *CLIPConfig) []float32 {
		ws := makeWeights(t, be, w)
		ctx, _ := native.NewContext(4096, 4096)
		defer ctx.Free()
		it, _ := ctx.NewTensor(formats.I32, int64(len(ids)))
		it.SetInput()
		g := &builder{c: ctx, w: ws}
		var out native.Tensor
		var err error
		func() {
			defer native.Recover(&err)
			h, _ := g.clip(cfg, it, -1)
			out = ctx.Cont(h).SetOutput()
		}()
		if err != nil {
			t.Fatal(err)
		}
		gr := ctx.NewGraph(4096)
		gr.Expand(out)
		a := be.NewAllocator()
		defer a.Free()
		if err := a.Alloc(gr); err != nil {
			t.Fatal(err)
		}
		it.SetI32(ids)
		if err := be.Compute(gr); err != nil {
			t.Fatal(err)
		}
		v, err := out.F32()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cfg := CLIPConfig{Prefix: clipPrefix, Hidden: h, FF: ff, Layers: 1, Vocab: vocab, Positions: pos, Heads: 2, Skip: 1, FinalNorm: true}
	a := run(split, &cfg)
	cfg.FusedQKV = true
	b := run(fused, &cfg)
	if e := maxRelErr(t, b, a); e > 1e-6 {
		t.Errorf("fused and split q/k/v differ by %g", e)
	}
}

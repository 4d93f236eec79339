//go:build cgo

package clip_test

import (
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/sd"
	"github.com/sdtool/sdtool/infer/encoder/clip"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/native"
)

// OpenCLIP's fused in_proj gives the same text encoder output as the same
// weights split into q_proj, k_proj and v_proj.
func TestCLIPFusedQKVMatchesSplit(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(15, 16))
	const h, ff, vocab, pos = 32, 64, 20, 8
	p := sd.CLIPPrefix
	l := p + "encoder.layers.0."
	common := map[string]inferutil.TestWeight{
		p + "embeddings.token_embedding.weight":    {Shape: []int64{vocab, h}, Typ: formats.F32, Data: inferutil.Randn(r, vocab*h, 1)},
		p + "embeddings.position_embedding.weight": {Shape: []int64{pos, h}, Typ: formats.F32, Data: inferutil.Randn(r, pos*h, 0.1)},
		l + "self_attn.out_proj.weight":            {Shape: []int64{h, h}, Typ: formats.F32, Data: inferutil.Randn(r, h*h, 0.2)},
		l + "self_attn.out_proj.bias":              {Shape: []int64{h}, Typ: formats.F32, Data: inferutil.Randn(r, h, 0.1)},
		l + "mlp.fc1.weight":                       {Shape: []int64{ff, h}, Typ: formats.F32, Data: inferutil.Randn(r, ff*h, 0.2)},
		l + "mlp.fc1.bias":                         {Shape: []int64{ff}, Typ: formats.F32, Data: inferutil.Randn(r, ff, 0.1)},
		l + "mlp.fc2.weight":                       {Shape: []int64{h, ff}, Typ: formats.F32, Data: inferutil.Randn(r, ff*h, 0.2)},
		l + "mlp.fc2.bias":                         {Shape: []int64{h}, Typ: formats.F32, Data: inferutil.Randn(r, h, 0.1)},
	}
	for _, n := range []string{l + "layer_norm1", l + "layer_norm2", p + "final_layer_norm"} {
		common[n+".weight"] = inferutil.TestWeight{Shape: []int64{h}, Typ: formats.F32, Data: inferutil.Randn(r, h, 1)}
		common[n+".bias"] = inferutil.TestWeight{Shape: []int64{h}, Typ: formats.F32, Data: inferutil.Randn(r, h, 0.1)}
	}
	qkvW, qkvB := inferutil.Randn(r, 3*h*h, 0.3), inferutil.Randn(r, 3*h, 0.1)
	fused := map[string]inferutil.TestWeight{
		l + "self_attn.in_proj.weight": {Shape: []int64{3 * h, h}, Typ: formats.F32, Data: qkvW},
		l + "self_attn.in_proj.bias":   {Shape: []int64{3 * h}, Typ: formats.F32, Data: qkvB},
	}
	split := map[string]inferutil.TestWeight{}
	for i, n := range []string{"q_proj", "k_proj", "v_proj"} {
		split[l+"self_attn."+n+".weight"] = inferutil.TestWeight{Shape: []int64{h, h}, Typ: formats.F32, Data: qkvW[i*h*h : (i+1)*h*h]}
		split[l+"self_attn."+n+".bias"] = inferutil.TestWeight{Shape: []int64{h}, Typ: formats.F32, Data: qkvB[i*h : (i+1)*h]}
	}
	for k, v := range common {
		fused[k], split[k] = v, v
	}
	ids := []int32{0, 5, 7, 19, 3, 19}
	run := func(w map[string]inferutil.TestWeight, cfg *clip.CLIPConfig) []float32 {
		ws := inferutil.MakeWeights(t, be, w)
		ctx, _ := native.NewContext(4096, 4096)
		defer ctx.Free()
		it, _ := ctx.NewTensor(formats.I32, int64(len(ids)))
		it.SetInput()
		g := &infer.Builder{Ctx: ctx, Weights: ws}
		var out native.Tensor
		var err error
		func() {
			defer native.Recover(&err)
			h, _ := clip.CLIP(g, cfg, it, -1)
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
	cfg := clip.CLIPConfig{Prefix: sd.CLIPPrefix, Hidden: h, FF: ff, Layers: 1, Vocab: vocab, Positions: pos, Heads: 2, Skip: 1, FinalNorm: true}
	a := run(split, &cfg)
	cfg.FusedQKV = true
	b := run(fused, &cfg)
	if e := inferutil.MaxRelErr(t, b, a); e > 1e-6 {
		t.Errorf("fused and split q/k/v differ by %g", e)
	}
}

package lora

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/names"
)

// pairCase is a base checkpoint A and a tuned one B = A + D, where each
// extractable weight's difference D has a known spectrum.
type pairCase struct {
	v       names.Version
	prefix  string
	tensors []formats.Tensor // A's list (names, shapes)
	a, b    *memModel
	spectra map[string][]float64 // per module: the singular values of its D
	modules map[string]string    // module -> what it should be named after
}

// spectrum s_i = 3·0.7^i for the first n values.
func decaying(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = 3 * math.Pow(0.7, float64(i))
	}
	return s
}

// buildPair makes A and B. layers maps a tensor name to its shape and, for
// extractable ones, the row ranges whose differences get their own spectra
// (one range for a plain weight, three for a fused in_proj).
func buildPair(t *testing.T, v names.Version, prefix string, tensors []formats.Tensor, split map[string]int, seed uint64) (*memModel, *memModel, map[string][][]float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 11))
	a, b := newMem("base.safetensors"), newMem("tuned.safetensors")
	spectra := map[string][][]float64{}
	for _, tt := range tensors {
		n := int(prod(tt.Shape))
		av := randn(r, n, 0.5)
		bv := append([]float32{}, av...)
		if len(tt.Shape) == 2 || len(tt.Shape) == 4 {
			parts := max(1, split[tt.Name])
			rows := int(tt.Shape[0]) / parts
			cols := n / int(tt.Shape[0])
			for p := 0; p < parts; p++ {
				s := decaying(min(rows, cols))
				d := spectrumMatrix(r, rows, cols, s)
				for i, x := range d {
					bv[p*rows*cols+i] += x
				}
				spectra[tt.Name] = append(spectra[tt.Name], s)
			}
		}
		a.add(tt.Name, formats.F32, tt.Shape, av)
		b.add(tt.Name, formats.F32, tt.Shape, bv)
	}
	return a, b, spectra
}

// extractAll runs the plan at opt and returns the adapter it gives.
func extractAll(t *testing.T, plan *ExtractPlan, a, b *memModel, opt ExtractOptions, dt formats.DType) (*memModel, []*Decomposition) {
	t.Helper()
	out := newMem("extracted.safetensors")
	var decs []*Decomposition
	for i := range plan.Layers {
		l := &plan.Layers[i]
		d, err := l.Diff(a, b)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := Decompose(d, int(l.Rows), int(l.Cols()), l.Module, opt)
		if err != nil {
			t.Fatal(err)
		}
		decs = append(decs, dec)
		ts, err := l.Tensors(dec, dt)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range ts {
			size, _ := o.Type.Bytes(o.Shape)
			out.list = append(out.list, formats.Tensor{Name: o.Name, Type: o.Type, Shape: o.Shape, File: out.path, Size: size})
			out.data[o.Name] = o.Data
		}
	}
	return out, decs
}

// bakeAndCompare bakes the adapter into A and returns, per tensor, the
// Frobenius norm of (baked − B).
func bakeAndCompare(t *testing.T, tensors []formats.Tensor, v names.Version, prefix string, a, b, adapter *memModel) map[string]float64 {
	t.Helper()
	base, err := NewBase(tensors, v, prefix)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := Read(adapter)
	if err != nil {
		t.Fatal(err)
	}
	p, err := base.Match(Use{Adapter: ad, Strength: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Unmatched) > 0 {
		t.Fatalf("unmatched: %+v", p.Unmatched)
	}
	errs := map[string]float64{}
	for _, tt := range tensors {
		w := decodeAll(t, a, tt.Name)
		if tg := p.Target(tt.Name); tg != nil {
			if err := tg.AddTo(w, 0); err != nil {
				t.Fatal(err)
			}
			tg.Release()
		}
		want := decodeAll(t, b, tt.Name)
		var e float64
		for i := range w {
			d := float64(w[i]) - float64(want[i])
			e += d * d
		}
		errs[tt.Name] = math.Sqrt(e)
	}
	return errs
}

func sd1Pair() ([]formats.Tensor, map[string]int, map[string]string) {
	var l nameShapes
	l.add("model.diffusion_model.input_blocks.1.1.proj_in.weight", 40, 40, 1, 1)
	l.add("model.diffusion_model.input_blocks.1.1.proj_in.bias", 40)
	l.add("model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", 48, 40)
	l.add("model.diffusion_model.input_blocks.1.0.in_layers.2.weight", 24, 16, 3, 3)
	l.add("model.diffusion_model.output_blocks.2.1.conv.weight", 16, 16, 3, 3)
	l.add("cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc1.weight", 64, 32)
	l.add("cond_stage_model.transformer.text_model.embeddings.token_embedding.weight", 50, 32)
	names := map[string]string{
		"lora_unet_down_blocks_0_attentions_0_proj_in":                         "model.diffusion_model.input_blocks.1.1.proj_in.weight",
		"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q": "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight",
		"lora_unet_down_blocks_0_resnets_0_conv1":                              "model.diffusion_model.input_blocks.1.0.in_layers.2.weight",
		"lora_unet_up_blocks_0_upsamplers_0_conv":                              "model.diffusion_model.output_blocks.2.1.conv.weight",
		"lora_te_text_model_encoder_layers_0_mlp_fc1":                          "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc1.weight",
	}
	return l, nil, names
}

// The property of extraction: baking the LoRA extracted from (A, B) into A
// gives B, exactly (to float32 rounding) at full rank and within the
// optimal truncation error (the norm of the dropped singular values) at a
// lower rank. Linear layers, 1x1 and 3x3 convolutions.
func TestExtractBakeRoundTrip(t *testing.T) {
	tensors, split, wantNames := sd1Pair()
	a, b, spectra := buildPair(t, names.SD1, "", tensors, split, 1)
	plan, err := PlanExtract(tensors, tensors, names.SD1, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, l := range plan.Layers {
		got[l.Module] = true
		if want, ok := wantNames[l.Module]; !ok || len(l.Sources) != 1 || l.Sources[0].Name != want {
			t.Errorf("layer %s from %+v", l.Module, l.Sources)
		}
		if !l.SDCpp {
			t.Errorf("%s: sd.cpp would not load it", l.Module)
		}
	}
	if len(got) != len(wantNames) {
		t.Errorf("layers %v, want %v", got, wantNames)
	}
	for _, c := range []struct {
		name string
		opt  ExtractOptions
		dt   formats.DType
	}{
		{"full rank f32", ExtractOptions{Rank: 1000}, formats.F32},
		{"rank 5 f32", ExtractOptions{Rank: 5}, formats.F32},
		{"rank 5 f16", ExtractOptions{Rank: 5}, formats.F16},
		{"energy 0.9", ExtractOptions{Energy: 0.9, MaxRank: 64}, formats.F32},
	} {
		t.Run(c.name, func(t *testing.T) {
			adapter, decs := extractAll(t, plan, a, b, c.opt, c.dt)
			errs := bakeAndCompare(t, tensors, names.SD1, "", a, b, adapter)
			for i, l := range plan.Layers {
				if c.opt.Rank > 0 && decs[i].Rank != l.Rank(c.opt) {
					t.Errorf("%s: rank %d, Rank() said %d", l.Module, decs[i].Rank, l.Rank(c.opt))
				}
				s := spectra[l.Sources[0].Name][0]
				var total, tail float64
				for j, x := range s {
					total += x * x
					if j >= decs[i].Rank {
						tail += x * x
					}
				}
				if c.opt.Energy > 0 && (decs[i].Kept < c.opt.Energy || decs[i].Rank > 0 && 1-(tail+s[decs[i].Rank-1]*s[decs[i].Rank-1])/total >= c.opt.Energy) {
					t.Errorf("%s: energy %v gives rank %d keeping %v", l.Module, c.opt.Energy, decs[i].Rank, decs[i].Kept)
				}
				if math.Abs(decs[i].Kept-(1-tail/total)) > 1e-5 {
					t.Errorf("%s: reports %v kept, the spectrum says %v", l.Module, decs[i].Kept, 1-tail/total)
				}
				e, opt := errs[l.Sources[0].Name], math.Sqrt(tail)
				// f32 data: rounding of B itself is ~1e-7 relative; f16
				// factors add ~1e-3 relative of the kept part.
				slack := 2e-6 * math.Sqrt(total)
				if c.dt == formats.F16 {
					slack = 2e-3 * math.Sqrt(total)
				}
				if e > opt*1.001+slack {
					t.Errorf("%s at rank %d: baked error %.3g, optimum %.3g", l.Module, decs[i].Rank, e, opt)
				}
			}
			// Tensors no layer covers are untouched (A's values, which B
			// shares for non-weights).
			if e := errs["model.diffusion_model.input_blocks.1.1.proj_in.bias"]; e != 0 {
				t.Errorf("bias changed by %g", e)
			}
		})
	}
}

// open_clip's fused in_proj (SD 2.x, SDXL's CLIP-G) is extracted as three
// kohya layers q, k, v, and a diffusers Flux file's to_q, to_k, to_v as one
// BFL qkv layer; both bake back.
func TestExtractFusedAndSplit(t *testing.T) {
	var sd2 nameShapes
	sd2.add("model.diffusion_model.input_blocks.1.1.proj_in.weight", 32, 32)
	sd2.add("cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight", 48, 16)
	sd2.add("cond_stage_model.model.transformer.resblocks.0.attn.out_proj.weight", 16, 16)
	var flux nameShapes
	for _, n := range []string{"to_q", "to_k", "to_v"} {
		flux.add("transformer_blocks.0.attn."+n+".weight", 24, 24)
	}
	flux.add("single_transformer_blocks.0.attn.to_q.weight", 24, 24)
	flux.add("single_transformer_blocks.0.attn.to_k.weight", 24, 24)
	flux.add("single_transformer_blocks.0.attn.to_v.weight", 24, 24)
	flux.add("single_transformer_blocks.0.proj_mlp.weight", 40, 24)
	for _, c := range []struct {
		name    string
		v       names.Version
		prefix  string
		tensors []formats.Tensor
		split   map[string]int
		want    map[string]int // module -> number of sources
	}{
		{"sd2 in_proj", names.SD2, "", sd2, map[string]int{"cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight": 3},
			map[string]int{"lora_unet_down_blocks_0_attentions_0_proj_in": 1, "lora_te_text_model_encoder_layers_0_self_attn_q_proj": 1,
				"lora_te_text_model_encoder_layers_0_self_attn_k_proj": 1, "lora_te_text_model_encoder_layers_0_self_attn_v_proj": 1,
				"lora_te_text_model_encoder_layers_0_self_attn_out_proj": 1}},
		{"flux diffusers", names.Flux, "model.diffusion_model.", flux, nil,
			map[string]int{"lora_unet_double_blocks_0_img_attn_qkv": 3, "lora_unet_single_blocks_0_linear1": 4}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, _ := buildPair(t, c.v, c.prefix, c.tensors, c.split, 2)
			plan, err := PlanExtract(c.tensors, c.tensors, c.v, c.prefix)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Layers) != len(c.want) {
				t.Errorf("%d layers, want %d", len(plan.Layers), len(c.want))
			}
			for _, l := range plan.Layers {
				if n, ok := c.want[l.Module]; !ok || n != len(l.Sources) {
					t.Errorf("layer %s with %d sources", l.Module, len(l.Sources))
				}
			}
			adapter, _ := extractAll(t, plan, a, b, ExtractOptions{Rank: 1000}, formats.F32)
			for name, e := range bakeAndCompare(t, c.tensors, c.v, c.prefix, a, b, adapter) {
				if e > 1e-4 {
					t.Errorf("%s: baked error %g at full rank", name, e)
				}
			}
		})
	}
}

func TestPlanExtractRefusesShapeMismatch(t *testing.T) {
	a := []formats.Tensor{{Name: "model.diffusion_model.input_blocks.1.1.proj_in.weight", Shape: []int64{8, 8}}}
	b := []formats.Tensor{{Name: "model.diffusion_model.input_blocks.1.1.proj_in.weight", Shape: []int64{8, 4}}}
	_, err := PlanExtract(a, b, names.SD1, "")
	if err == nil || !containsAll(err.Error(), "proj_in.weight", "[8 8]", "[8 4]") {
		t.Errorf("error %v", err)
	}
	p, err := PlanExtract(a, nil, names.SD1, "")
	if err != nil || len(p.Layers) != 0 || len(p.Skipped) != 1 {
		t.Errorf("missing tensor: %+v, %v", p, err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

func TestExtractDiffers(t *testing.T) {
	tensors, split, _ := sd1Pair()
	a, b, _ := buildPair(t, names.SD1, "", tensors, split, 3)
	// Make one weight the same in both.
	same := "model.diffusion_model.output_blocks.2.1.conv.weight"
	b.data[same] = a.data[same]
	plan, err := PlanExtract(tensors, tensors, names.SD1, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range plan.Layers {
		d, err := l.Differs(a, b)
		if err != nil {
			t.Fatal(err)
		}
		if want := l.Sources[0].Name != same; d != want {
			t.Errorf("%s: Differs %v, want %v", l.Module, d, want)
		}
	}
}

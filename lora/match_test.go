package lora

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/names"
)

// bakeAll applies a plan to base data held in m and returns every
// tensor's values afterwards.
func bakeAll(t *testing.T, p *Plan, m *memModel) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, tt := range m.list {
		w := decodeAll(t, m, tt.Name)
		if tg := p.Target(tt.Name); tg != nil {
			if err := tg.AddTo(w, 0); err != nil {
				t.Fatal(err)
			}
			tg.Release()
		}
		out[tt.Name] = w
	}
	return out
}

func matchModels(t *testing.T, base *memModel, v names.Version, prefix string, uses ...Use) *Plan {
	t.Helper()
	b, err := NewBase(base.list, v, prefix)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Match(uses...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readAdapter(t *testing.T, m *memModel) *Adapter {
	t.Helper()
	a, err := Read(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A kohya LoRA on the fused BFL qkv, baked into a diffusers base that
// stores to_q, to_k and to_v apart, changes each by its rows of up·down;
// the same delta as a diffusers LoRA on a BFL base fills the qkv rows.
func TestFusedAndSplitPlacement(t *testing.T) {
	const h, r = 8, 3
	rng := rand.New(rand.NewPCG(1, 1))
	up, down := randn(rng, 3*h*r, 1), randn(rng, r*h, 1)
	full := refLoRA(up, down, 3*h, r, h)

	// Fused adapter, split base.
	split := newMem("diffusers.safetensors")
	for _, n := range []string{"to_q", "to_k", "to_v"} {
		split.add("transformer_blocks.0.attn."+n+".weight", formats.F32, []int64{h, h}, randn(rng, h*h, 1))
	}
	fused := newMem("kohya.safetensors")
	fused.add("lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", formats.F32, []int64{3 * h, r}, up)
	fused.add("lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", formats.F32, []int64{r, h}, down)
	p := matchModels(t, split, names.Flux, "model.diffusion_model.", Use{readAdapter(t, fused), 1})
	if len(p.Targets) != 3 {
		t.Fatalf("%d targets", len(p.Targets))
	}
	got := bakeAll(t, p, split)
	for k, n := range []string{"to_q", "to_k", "to_v"} {
		name := "transformer_blocks.0.attn." + n + ".weight"
		base := decodeAll(t, split, name)
		want := make([]float64, h*h)
		for i := range want {
			want[i] = float64(base[i]) + full[k*h*h+i]
		}
		checkClose(t, n, got[name], want, 1e-5)
	}

	// Split adapter (only k and v: q untouched), fused base.
	bfl := newMem("flux.safetensors")
	bfl.add("double_blocks.0.img_attn.qkv.weight", formats.F32, []int64{3 * h, h}, randn(rng, 3*h*h, 1))
	bfl.add("single_blocks.0.linear1.weight", formats.F32, []int64{3*h + 2*h, h}, randn(rng, 5*h*h, 1))
	peft := newMem("peft.safetensors")
	for k, n := range []string{"to_k", "to_v"} {
		peft.add("transformer.transformer_blocks.0.attn."+n+".lora_B.weight", formats.F32, []int64{h, r}, up[(k+1)*h*r:(k+2)*h*r])
		peft.add("transformer.transformer_blocks.0.attn."+n+".lora_A.weight", formats.F32, []int64{r, h}, down)
	}
	// q, k, v of a single block, no proj_mlp: the MLP rows stay.
	for k, n := range []string{"to_q", "to_k", "to_v"} {
		peft.add("transformer.single_transformer_blocks.0.attn."+n+".lora_B.weight", formats.F32, []int64{h, r}, up[k*h*r:(k+1)*h*r])
		peft.add("transformer.single_transformer_blocks.0.attn."+n+".lora_A.weight", formats.F32, []int64{r, h}, down)
	}
	p = matchModels(t, bfl, names.Flux, "model.diffusion_model.", Use{readAdapter(t, peft), 1})
	got = bakeAll(t, p, bfl)
	qkv := decodeAll(t, bfl, "double_blocks.0.img_attn.qkv.weight")
	want := make([]float64, 3*h*h)
	for i := range want {
		want[i] = float64(qkv[i])
		if i >= h*h {
			want[i] += full[i]
		}
	}
	checkClose(t, "qkv", got["double_blocks.0.img_attn.qkv.weight"], want, 1e-5)
	lin := decodeAll(t, bfl, "single_blocks.0.linear1.weight")
	want = make([]float64, 5*h*h)
	for i := range want {
		want[i] = float64(lin[i])
		if i < 3*h*h {
			want[i] += full[i]
		}
	}
	checkClose(t, "linear1", got["single_blocks.0.linear1.weight"], want, 1e-5)
}

func TestShapeMismatchNamesBoth(t *testing.T) {
	base := newMem("sd1.safetensors")
	base.add("model.diffusion_model.input_blocks.1.1.proj_in.weight", formats.F16, []int64{320, 320, 1, 1}, nil)
	base.add("model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", formats.F16, []int64{320, 768}, nil)
	ad := newMem("sdxl_lora.safetensors")
	// An SDXL cross-attention LoRA (context 2048) on an SD 1.x base.
	ad.add("lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_up.weight", formats.F16, []int64{320, 4}, nil)
	ad.add("lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_down.weight", formats.F16, []int64{4, 2048}, nil)
	// A qkv LoRA whose rows fit no part.
	ad.add("lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight", formats.F16, []int64{640, 4, 1, 1}, nil)
	ad.add("lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight", formats.F16, []int64{4, 320, 1, 1}, nil)
	b, err := NewBase(base.list, names.SD1, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Match(Use{readAdapter(t, ad), 1})
	if err == nil {
		t.Fatal("mismatched shapes accepted")
	}
	msg := err.Error()
	for _, s := range []string{
		"sdxl_lora.safetensors", "attn2_to_k.lora_up.weight", "transformer_blocks.0.attn2.to_k.weight", "[320 768]", "2048",
		"proj_in.lora_down.weight", "[320 320 1 1]", "640 rows",
	} {
		if !strings.Contains(msg, s) {
			t.Errorf("error does not mention %q:\n%s", s, msg)
		}
	}
}

func TestUnmatchedAndDuplicates(t *testing.T) {
	base := newMem("sd1.safetensors")
	base.add("model.diffusion_model.input_blocks.1.1.proj_in.weight", formats.F16, []int64{8, 8}, nil)
	ad := newMem("a.safetensors")
	ad.add("lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight", formats.F16, []int64{8, 2}, nil)
	ad.add("lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight", formats.F16, []int64{2, 8}, nil)
	ad.add("lora_unet_nowhere_to_be_found.lora_up.weight", formats.F16, []int64{8, 2}, nil)
	ad.add("lora_unet_nowhere_to_be_found.lora_down.weight", formats.F16, []int64{2, 8}, nil)
	ad.add("some_other_tensor", formats.F16, []int64{3}, nil)
	ad.add("lora_unet_lonely.alpha", formats.F16, nil, []float32{1})
	p := matchModels(t, base, names.SD1, "", Use{readAdapter(t, ad), 1})
	if len(p.Targets) != 1 {
		t.Errorf("%d targets", len(p.Targets))
	}
	var keys []string
	for _, u := range p.Unmatched {
		keys = append(keys, u.Keys...)
		if u.Reason == "" {
			t.Errorf("unmatched %v without a reason", u.Keys)
		}
	}
	got := strings.Join(keys, " ")
	for _, k := range []string{"lora_unet_nowhere_to_be_found.lora_up.weight", "lora_unet_nowhere_to_be_found.lora_down.weight", "some_other_tensor", "lora_unet_lonely.alpha"} {
		if !strings.Contains(got, k) {
			t.Errorf("%s not listed as unmatched (%s)", k, got)
		}
	}

	// The same module twice, under kohya and diffusers names.
	ad.add("unet.down_blocks.0.attentions.0.proj_in.lora_A.weight", formats.F16, []int64{2, 8}, nil)
	ad.add("unet.down_blocks.0.attentions.0.proj_in.lora_B.weight", formats.F16, []int64{8, 2}, nil)
	b, _ := NewBase(base.list, names.SD1, "")
	if _, err := b.Match(Use{readAdapter(t, ad), 1}); err == nil || !strings.Contains(err.Error(), "both change") {
		t.Errorf("duplicate layers: %v", err)
	}
}

// Two adapters add; strengths scale (negative ones too); F16 and BF16
// factors decode as stored.
func TestAdaptersSumWithStrengths(t *testing.T) {
	const o, i, r = 16, 12, 4
	rng := rand.New(rand.NewPCG(2, 2))
	base := newMem("base.safetensors")
	base.add("double_blocks.0.img_attn.proj.weight", formats.F32, []int64{o, i}, randn(rng, o*i, 1))
	var refs [2][]float64
	var uses []Use
	for k, dt := range []formats.DType{formats.F16, formats.BF16} {
		ad := newMem("a" + dt.String())
		up, down := randn(rng, o*r, 1), randn(rng, r*i, 1)
		ad.add("lora_unet_double_blocks_0_img_attn_proj.lora_up.weight", dt, []int64{o, r}, up)
		ad.add("lora_unet_double_blocks_0_img_attn_proj.lora_down.weight", dt, []int64{r, i}, down)
		ad.add("lora_unet_double_blocks_0_img_attn_proj.alpha", dt, nil, []float32{8})
		a := readAdapter(t, ad)
		// The reference uses the values as stored (rounded to the dtype).
		refs[k] = scale(refLoRA(decodeAll(t, ad, "lora_unet_double_blocks_0_img_attn_proj.lora_up.weight"),
			decodeAll(t, ad, "lora_unet_double_blocks_0_img_attn_proj.lora_down.weight"), o, r, i), 2)
		uses = append(uses, Use{a, []float64{0.5, -1.25}[k]})
	}
	p := matchModels(t, base, names.Flux, "model.diffusion_model.", uses...)
	if tg := p.Target("double_blocks.0.img_attn.proj.weight"); tg == nil || len(tg.Changes) != 2 {
		t.Fatalf("target %+v", tg)
	}
	got := bakeAll(t, p, base)["double_blocks.0.img_attn.proj.weight"]
	w := decodeAll(t, base, "double_blocks.0.img_attn.proj.weight")
	want := make([]float64, o*i)
	for k := range want {
		want[k] = float64(w[k]) + 0.5*refs[0][k] - 1.25*refs[1][k]
	}
	checkClose(t, "sum", got, want, 1e-4)
}

// A DoRA layer sets each row's norm: W' = W + s·(m/‖W+ΔW‖·(W+ΔW) − W).
func TestDoRARowWise(t *testing.T) {
	const o, i, r = 10, 14, 3
	rng := rand.New(rand.NewPCG(3, 3))
	w := randn(rng, o*i, 1)
	base := newMem("base.safetensors")
	base.add("model.diffusion_model.blocks.0.self_attn.q.weight", formats.F32, []int64{o, i}, w)
	up, down, mag := randn(rng, o*r, 1), randn(rng, r*i, 1), randn(rng, o, 1)
	for k := range mag {
		mag[k] = 1 + float32(math.Abs(float64(mag[k])))
	}
	ad := newMem("dora.safetensors")
	ad.add("lora_unet_blocks_0_self_attn_q.lora_up.weight", formats.F32, []int64{o, r}, up)
	ad.add("lora_unet_blocks_0_self_attn_q.lora_down.weight", formats.F32, []int64{r, i}, down)
	ad.add("lora_unet_blocks_0_self_attn_q.alpha", formats.F32, nil, []float32{1.5})
	ad.add("lora_unet_blocks_0_self_attn_q.dora_scale", formats.F32, []int64{o, 1}, mag)
	const s = 0.8
	p := matchModels(t, base, names.Wan2, "", Use{readAdapter(t, ad), s})
	tg := p.Target("model.diffusion_model.blocks.0.self_attn.q.weight")
	if tg == nil || !tg.Changes[0].Layer.DoRA {
		t.Fatalf("target %+v", tg)
	}
	delta := scale(refLoRA(up, down, o, r, i), 0.5)
	want := make([]float64, o*i)
	for row := 0; row < o; row++ {
		var n float64
		for j := 0; j < i; j++ {
			x := float64(w[row*i+j]) + delta[row*i+j]
			n += x * x
		}
		f := float64(mag[row]) / (math.Sqrt(n) + doraEps)
		for j := 0; j < i; j++ {
			x := float64(w[row*i+j]) + delta[row*i+j]
			want[row*i+j] = float64(w[row*i+j]) + s*(f*x-float64(w[row*i+j]))
		}
	}
	got := append([]float32{}, w...)
	// Whole rows, two at a time.
	for row := 0; row < o; row += 2 {
		if err := tg.AddTo(got[row*i:(row+2)*i], int64(row*i)); err != nil {
			t.Fatal(err)
		}
	}
	checkClose(t, "dora", got, want, 1e-5)
	if err := tg.AddTo(got[1:i+1], 1); err == nil || !strings.Contains(err.Error(), "whole rows") {
		t.Errorf("partial rows with DoRA: %v", err)
	}

	// The input-axis variant is refused when the adapter is read.
	col := newMem("dora_in.safetensors")
	col.add("lora_unet_blocks_0_self_attn_q.lora_up.weight", formats.F32, []int64{o, r}, up)
	col.add("lora_unet_blocks_0_self_attn_q.lora_down.weight", formats.F32, []int64{r, i}, down)
	col.add("lora_unet_blocks_0_self_attn_q.dora_scale", formats.F32, []int64{1, i}, randn(rng, i, 1))
	if _, err := Read(col); err == nil || !strings.Contains(err.Error(), "column-wise DoRA") {
		t.Errorf("column-wise DoRA: %v", err)
	}
}

func TestReadRefusesBadFactors(t *testing.T) {
	for _, c := range []struct {
		name string
		add  func(m *memModel)
		want []string
	}{
		{"rank mismatch", func(m *memModel) {
			m.add("x.lora_up.weight", formats.F16, []int64{8, 4}, nil)
			m.add("x.lora_down.weight", formats.F16, []int64{3, 8}, nil)
		}, []string{`"x.lora_up.weight" [8 4]`, `"x.lora_down.weight" [3 8]`, "rank"}},
		{"up without down", func(m *memModel) {
			m.add("x.lora_up.weight", formats.F16, []int64{8, 4}, nil)
		}, []string{"x", "no down"}},
		{"non-scalar alpha", func(m *memModel) {
			m.add("x.lora_up.weight", formats.F16, []int64{8, 4}, nil)
			m.add("x.lora_down.weight", formats.F16, []int64{4, 8}, nil)
			m.add("x.alpha", formats.F16, []int64{2}, nil)
		}, []string{"x.alpha", "not a scalar"}},
		{"NaN alpha", func(m *memModel) {
			m.add("x.lora_up.weight", formats.F16, []int64{8, 4}, nil)
			m.add("x.lora_down.weight", formats.F16, []int64{4, 8}, nil)
			m.add("x.alpha", formats.F32, nil, []float32{float32(math.NaN())})
		}, []string{"x.alpha", "NaN"}},
		{"integer factor", func(m *memModel) {
			m.add("x.lora_up.weight", formats.I32, []int64{8, 4}, nil)
			m.add("x.lora_down.weight", formats.F16, []int64{4, 8}, nil)
		}, []string{"x.lora_up.weight", "i32"}},
		{"loha halves disagree", func(m *memModel) {
			m.add("x.hada_w1_a", formats.F16, []int64{8, 2}, nil)
			m.add("x.hada_w1_b", formats.F16, []int64{2, 6}, nil)
			m.add("x.hada_w2_a", formats.F16, []int64{8, 2}, nil)
			m.add("x.hada_w2_b", formats.F16, []int64{2, 5}, nil)
		}, []string{"x", "8x6", "8x5"}},
		{"mixed kinds", func(m *memModel) {
			m.add("x.lora_up.weight", formats.F16, []int64{8, 4}, nil)
			m.add("x.hada_w1_a", formats.F16, []int64{8, 2}, nil)
		}, []string{"x", "mixes"}},
	} {
		m := newMem("bad.safetensors")
		c.add(m)
		_, err := Read(m)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, s := range append(c.want, "bad.safetensors") {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, s)
			}
		}
	}
}

// An adapter written as a real safetensors file opens through formats.Open.
func TestOpenSafetensors(t *testing.T) {
	tensors := []formats.Tensor{
		{Name: "lora_unet_double_blocks_0_img_attn_qkv.alpha", Type: formats.BF16, Shape: []int64{}},
		{Name: "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", Type: formats.BF16, Shape: []int64{2, 4}},
		{Name: "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", Type: formats.BF16, Shape: []int64{12, 2}},
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, tensors, map[string]string{"ss_network_module": "networks.lora_flux"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tensors {
		n := int(prod(tt.Shape))
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		w.Write(encode(formats.BF16, v))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "flux_lora.safetensors")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if len(a.Layers) != 1 || a.Layers[0].Rank != 2 || a.Layers[0].Scale != 0.5 || a.Layers[0].Rows != 12 || a.Styles["kohya"] != 1 {
		t.Errorf("layers %+v styles %v", a.Layers, a.Styles)
	}
}

// Targets that share a layer (a fused qkv LoRA on split q, k, v) are
// computed by several goroutines at once, in chunks, with the same result
// as one pass; run with -race.
func TestConcurrentAddTo(t *testing.T) {
	const h, r = 16, 4
	rng := rand.New(rand.NewPCG(9, 9))
	split := newMem("diffusers.safetensors")
	for _, n := range []string{"to_q", "to_k", "to_v"} {
		split.add("transformer_blocks.0.attn."+n+".weight", formats.F32, []int64{h, h}, nil)
	}
	ad := newMem("kohya.safetensors")
	ad.add("lora_unet_double_blocks_0_img_attn_qkv.hada_w1_a", formats.F32, []int64{3 * h, r}, randn(rng, 3*h*r, 1))
	ad.add("lora_unet_double_blocks_0_img_attn_qkv.hada_w1_b", formats.F32, []int64{r, h}, randn(rng, r*h, 1))
	ad.add("lora_unet_double_blocks_0_img_attn_qkv.hada_w2_a", formats.F32, []int64{3 * h, r}, randn(rng, 3*h*r, 1))
	ad.add("lora_unet_double_blocks_0_img_attn_qkv.hada_w2_b", formats.F32, []int64{r, h}, randn(rng, r*h, 1))
	p := matchModels(t, split, names.Flux, "model.diffusion_model.", Use{readAdapter(t, ad), 1})
	want := map[string][]float32{}
	for _, tg := range p.Targets {
		w := make([]float32, h*h)
		if err := tg.AddTo(w, 0); err != nil {
			t.Fatal(err)
		}
		want[tg.Name] = w
		tg.Release()
	}
	got := map[string][]float32{}
	for _, tg := range p.Targets {
		got[tg.Name] = make([]float32, h*h)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for _, tg := range p.Targets {
		for off := 0; off < h*h; off += 24 {
			wg.Add(1)
			go func(tg *Target, off int) {
				defer wg.Done()
				end := min(off+24, h*h)
				if err := tg.AddTo(got[tg.Name][off:end], int64(off)); err != nil {
					errs <- err
				}
			}(tg, off)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for name, w := range want {
		for i := range w {
			if got[name][i] != w[i] {
				t.Fatalf("%s[%d]: %v concurrently, %v alone", name, i, got[name][i], w[i])
			}
		}
	}
	for _, tg := range p.Targets {
		tg.Release()
	}
	if l := p.Targets[0].Changes[0].Layer; l.refs != 0 || l.k != nil {
		t.Errorf("layer still holds %d references", l.refs)
	}
}

// Keys in sd.cpp's own form (what its name conversion makes of any LoRA
// key) match too, fused parts included.
func TestSDCppFormKeys(t *testing.T) {
	const h = 4
	split := newMem("flux.safetensors")
	split.add("double_blocks.0.img_attn.qkv.weight", formats.F32, []int64{3 * h, h}, nil)
	split.add("double_blocks.0.img_attn.proj.bias", formats.F32, []int64{h}, nil)
	ad := newMem("converted.gguf")
	for _, src := range []string{"transformer.transformer_blocks.0.attn.to_q", "transformer.transformer_blocks.0.attn.to_k"} {
		for _, kind := range []string{".lora_A.weight", ".lora_B.weight"} {
			name := names.Convert("lora."+src+kind, names.Flux)
			shape := []int64{2, h}
			if kind == ".lora_B.weight" {
				shape = []int64{h, 2}
			}
			ad.add(name, formats.F32, shape, nil)
		}
	}
	ad.add(names.Convert("lora.diffusion_model.double_blocks.0.img_attn.proj.diff_b", names.Flux), formats.F32, []int64{h}, nil)
	p := matchModels(t, split, names.Flux, "model.diffusion_model.", Use{readAdapter(t, ad), 1})
	if len(p.Unmatched) != 0 || len(p.Targets) != 2 {
		t.Fatalf("unmatched %+v, %d targets", p.Unmatched, len(p.Targets))
	}
	tg := p.Target("double_blocks.0.img_attn.qkv.weight")
	if len(tg.Changes) != 2 || tg.Changes[1].TargetRow != h || tg.Changes[1].Rows != h {
		t.Errorf("changes %+v", tg.Changes)
	}
}

// A LoCon whose down factor is stored flat fits the convolution by length;
// one whose kernel differs does not.
func TestConvFactorShapes(t *testing.T) {
	base := newMem("sd1.safetensors")
	base.add("model.diffusion_model.input_blocks.1.0.in_layers.2.weight", formats.F32, []int64{8, 4, 3, 3}, nil)
	flat := newMem("flat.safetensors")
	flat.add("lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", formats.F32, []int64{8, 2}, nil)
	flat.add("lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", formats.F32, []int64{2, 36}, nil)
	matchModels(t, base, names.SD1, "", Use{readAdapter(t, flat), 1})
	wrong := newMem("wrong.safetensors")
	wrong.add("lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", formats.F32, []int64{8, 2, 1, 1}, nil)
	wrong.add("lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", formats.F32, []int64{2, 36, 1, 1}, nil)
	b, _ := NewBase(base.list, names.SD1, "")
	if _, err := b.Match(Use{readAdapter(t, wrong), 1}); err == nil || !strings.Contains(err.Error(), "[36 1 1]") {
		t.Errorf("kernel mismatch: %v", err)
	}
}

func TestSummaryPEFTNote(t *testing.T) {
	m := &metaModel{memModel: newMem("peft.safetensors"), meta: formats.Metadata{{Key: "lora_adapter_metadata", Type: formats.TypeString,
		Value: `{"transformer.r": 16, "transformer.lora_alpha": 8, "transformer.target_modules": ["to_q"]}`}}}
	m.add("transformer.transformer_blocks.0.attn.to_q.lora_A.weight", formats.F16, []int64{16, 8}, nil)
	m.add("transformer.transformer_blocks.0.attn.to_q.lora_B.weight", formats.F16, []int64{8, 16}, nil)
	a, err := Read(m)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(a)
	if len(s.Notes) != 1 || !strings.Contains(s.Notes[0], "scales by 0.5") || a.Layers[0].Scale != 1 {
		t.Errorf("notes %q, scale %v", s.Notes, a.Layers[0].Scale)
	}
}

type metaModel struct {
	*memModel
	meta formats.Metadata
}

func (m *metaModel) Metadata() formats.Metadata { return m.meta }

// TestFusedPartsExactRows: each diffusers part of a fused Flux tensor must
// have exactly its part's rows (q, k, v the width, proj_mlp the rest), and
// any subset of parts is placed at the parts' own rows (issue 35, item 7:
// a to_q of 3w rows changed k and v too, a short proj_mlp left rows out, a
// short to_v was accepted, and a to_q alone was refused).
func TestFusedPartsExactRows(t *testing.T) {
	const h, r = 8, 2
	rng := rand.New(rand.NewPCG(3, 3))
	bfl := newMem("flux.safetensors")
	bfl.add("double_blocks.0.img_attn.qkv.weight", formats.F32, []int64{3 * h, h}, randn(rng, 3*h*h, 1))
	bfl.add("single_blocks.0.linear1.weight", formats.F32, []int64{3*h + 2*h, h}, randn(rng, 5*h*h, 1))
	adapter := func(layers map[string]int64) *Adapter {
		m := newMem("peft.safetensors")
		for n, rows := range layers {
			m.add("transformer."+n+".lora_B.weight", formats.F32, []int64{rows, r}, randn(rng, int(rows)*r, 1))
			m.add("transformer."+n+".lora_A.weight", formats.F32, []int64{r, h}, randn(rng, r*h, 1))
		}
		return readAdapter(t, m)
	}
	b, err := NewBase(bfl.list, names.Flux, "model.diffusion_model.")
	if err != nil {
		t.Fatal(err)
	}
	for name, rows := range map[string]int64{
		"transformer_blocks.0.attn.to_q":        3 * h,
		"transformer_blocks.0.attn.to_v":        h - 1,
		"single_transformer_blocks.0.proj_mlp":  2*h - 1,
		"single_transformer_blocks.0.attn.to_k": h + 1,
	} {
		if _, err := b.Match(Use{adapter(map[string]int64{name: rows}), 1}); err == nil || !strings.Contains(err.Error(), "rows") {
			t.Errorf("%s with %d rows: %v, want a refusal", name, rows, err)
		}
	}
	// to_q alone and proj_mlp alone: only their rows change.
	for _, c := range []struct {
		name, base string
		rows, from int64
	}{
		{"transformer_blocks.0.attn.to_q", "double_blocks.0.img_attn.qkv.weight", h, 0},
		{"single_transformer_blocks.0.proj_mlp", "single_blocks.0.linear1.weight", 2 * h, 3 * h},
		{"single_transformer_blocks.0.attn.to_v", "single_blocks.0.linear1.weight", h, 2 * h},
	} {
		p, err := b.Match(Use{adapter(map[string]int64{c.name: c.rows}), 1})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		tg := p.Target(c.base)
		if tg == nil || len(tg.Changes) != 1 {
			t.Fatalf("%s: target %+v", c.name, tg)
		}
		if ch := tg.Changes[0]; ch.TargetRow != c.from || ch.Rows != c.rows || ch.LayerRow != 0 {
			t.Errorf("%s: placed at rows [%d, %d), want [%d, %d)", c.name, ch.TargetRow, ch.TargetRow+ch.Rows, c.from, c.from+c.rows)
		}
	}
}

// TestAmbiguousAdapterTensorsRefused: a LoKr holding both lokr_w1 and its
// factors, and an alpha stored as a bool, are refused naming the module
// instead of silently using one of them or reading true as 1 (issue 35,
// item 9).
func TestAmbiguousAdapterTensorsRefused(t *testing.T) {
	const h = 4
	rng := rand.New(rand.NewPCG(5, 5))
	lokr := newMem("lokr.safetensors")
	m := "lycoris_blocks_0_attn1_to_q"
	lokr.add(m+".lokr_w1", formats.F32, []int64{2, 2}, randn(rng, 4, 1))
	lokr.add(m+".lokr_w1_a", formats.F32, []int64{2, 1}, randn(rng, 2, 1))
	lokr.add(m+".lokr_w1_b", formats.F32, []int64{1, 2}, randn(rng, 2, 1))
	lokr.add(m+".lokr_w2", formats.F32, []int64{2, 2}, randn(rng, 4, 1))
	if _, err := Read(lokr); err == nil || !strings.Contains(err.Error(), "both lokr_w1 and its factors") {
		t.Errorf("LoKr with lokr_w1 and lokr_w1_a/_b: %v", err)
	}
	lora := newMem("bool.safetensors")
	k := "lora_unet_down_blocks_0_attentions_0_proj_in"
	lora.add(k+".lora_up.weight", formats.F32, []int64{h, 1}, randn(rng, h, 1))
	lora.add(k+".lora_down.weight", formats.F32, []int64{1, h}, randn(rng, h, 1))
	lora.add(k+".alpha", formats.Bool, []int64{}, nil)
	lora.data[k+".alpha"] = []byte{1}
	if _, err := Read(lora); err == nil || !strings.Contains(err.Error(), "is a bool") {
		t.Errorf("bool alpha: %v", err)
	}
}

package mix

import (
	"regexp"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func mustParse(t *testing.T, s string) FType {
	t.Helper()
	f, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestParse(t *testing.T) {
	for in, want := range map[string]string{"q4_k_m": "Q4_K_M", "Q4_K": "Q4_K_M", "q4_k": "Q4_K_M", "q3_k": "Q3_K_M", "Q5_K_S": "Q5_K_S", "Q8_0": "Q8_0",
		"q8_0": "q8_0", "q4_K": "q4_K", "iq2_xxs": "iq2_xxs", "IQ2_XXS": "iq2_xxs", "Q2_K": "Q2_K", "q2_K": "q2_K"} {
		if got := mustParse(t, in); got.Name != want {
			t.Errorf("Parse(%q) = %s, want %s", in, got.Name, want)
		}
	}
	if f := mustParse(t, "Q4_K_M"); f.ID != 15 || f.Base != formats.Q4_K {
		t.Errorf("Q4_K_M: %+v", f)
	}
	if f := mustParse(t, "iq2_xxs"); f.ID != 19 || !f.Plain {
		t.Errorf("iq2_xxs: %+v", f)
	}
	if f := mustParse(t, "q4_K"); !f.Plain || f.ID != 15 || f.Base != formats.Q4_K {
		t.Errorf("q4_K: %+v", f)
	}
	// A plain type gets no upgrades: the V projection stays q2_K.
	v := Input{"double_blocks.0.img_attn.to_v.weight", []int64{3072, 3072}, formats.BF16}
	if got, _ := Choose(mustParse(t, "q2_K"), []Input{v}, Options{Arch: "flux"}); got[0].Type != formats.Q2_K {
		t.Errorf("plain q2_K upgraded the V projection to %s", got[0].Type)
	}
	if got, _ := Choose(mustParse(t, "Q2_K"), []Input{v}, Options{Arch: "flux"}); got[0].Type != formats.Q3_K {
		t.Errorf("Q2_K mix gave the V projection %s", got[0].Type)
	}
	for _, bad := range []string{"Q9_K", "q8_K", "nvfp4", "i32"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestChooseSD1(t *testing.T) {
	in := []Input{
		{"model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", []int64{320, 320}, formats.F16},
		{"model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_v.weight", []int64{512, 512}, formats.F16},
		{"model.diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2.weight", []int64{512, 1024}, formats.F16},
		{"model.diffusion_model.input_blocks.1.1.norm.weight", []int64{320}, formats.F16},
		{"model.diffusion_model.input_blocks.1.1.norm.weight", []int64{320}, formats.F32},
		{"model.diffusion_model.input_blocks.0.0.weight", []int64{320, 4, 3, 3}, formats.F16},
		{"model.diffusion_model.time_embed.0.weight", []int64{1280, 320}, formats.F32},
		{"model.diffusion_model.input_blocks.1.0.in_layers.2.weight", []int64{320, 320, 3, 3}, formats.BF16},
		{"model.diffusion_model.input_blocks.4.1.proj_in.weight", []int64{640, 640}, formats.F16},
		{"x.ids", []int64{8}, formats.I32},
	}
	got, err := Choose(mustParse(t, "Q4_K_M"), in, Options{Arch: "sd1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []formats.DType{formats.Q5_0, formats.Q6_K, formats.Q6_K, formats.F16, formats.F32, formats.F16, formats.F16, formats.BF16, formats.Q5_0, formats.I32}
	for i := range want {
		if got[i].Type != want[i] {
			t.Errorf("%s (%s): %s (%s), want %s", in[i].Name, in[i].Source, got[i].Type, got[i].Reason, want[i])
		}
	}
	pure, _ := Choose(mustParse(t, "Q4_K_M"), in[1:2], Options{Arch: "sd1", Pure: true})
	if pure[0].Type != formats.Q4_K {
		t.Errorf("--pure V projection: %s", pure[0].Type)
	}
	re := regexp.MustCompile(`attn1`)
	over, _ := Choose(mustParse(t, "Q4_K_M"), in[:2], Options{Arch: "sd1", Override: func(n string) (formats.DType, bool) {
		return formats.Q8_0, re.MatchString(n)
	}})
	if over[0].Type != formats.Q8_0 || over[1].Type != formats.Q8_0 {
		t.Errorf("override: %v %v", over[0].Type, over[1].Type)
	}
	rs, _ := Choose(mustParse(t, "Q4_K_M"), in[7:8], Options{Arch: "sd1", ReshapeConv: true})
	if !rs[0].Reshaped || rs[0].Type != formats.Q4_K || rs[0].Shape[1] != 256 || rs[0].Shape[0] != 320*320*9/256 {
		t.Errorf("reshape-conv: %+v", rs[0])
	}
}

func TestMixUpgrades(t *testing.T) {
	v := Input{"double_blocks.0.img_attn.to_v.weight", []int64{3072, 3072}, formats.BF16}
	qkv := Input{"double_blocks.0.img_attn.qkv.weight", []int64{9216, 3072}, formats.BF16}
	down := Input{"blocks.0.ffn.2.weight", []int64{3072, 8192}, formats.BF16}
	cases := []struct {
		mix          string
		v, qkv, down formats.DType
	}{
		{"Q2_K", formats.Q3_K, formats.Q2_K, formats.Q2_K},
		{"Q3_K_S", formats.Q3_K, formats.Q3_K, formats.Q3_K},
		{"Q3_K_M", formats.Q5_K, formats.Q4_K, formats.Q4_K},
		{"Q3_K_L", formats.Q5_K, formats.Q4_K, formats.Q5_K},
		{"Q4_K_S", formats.Q5_K, formats.Q4_K, formats.Q5_K},
		{"Q4_K_M", formats.Q6_K, formats.Q5_K, formats.Q6_K},
		{"Q5_K_M", formats.Q6_K, formats.Q6_K, formats.Q6_K},
		{"Q4_0", formats.Q4_0, formats.Q4_0, formats.Q4_1},
		{"Q5_0", formats.Q5_0, formats.Q5_0, formats.Q5_1},
	}
	for _, c := range cases {
		got, _ := Choose(mustParse(t, c.mix), []Input{v, qkv, down}, Options{Arch: "flux"})
		if got[0].Type != c.v || got[1].Type != c.qkv || got[2].Type != c.down {
			t.Errorf("%s: v=%s qkv=%s down=%s, want %s %s %s", c.mix, got[0].Type, got[1].Type, got[2].Type, c.v, c.qkv, c.down)
		}
	}
	// Q3_K_M raises only the first two V projections to Q5_K, then Q4_K.
	got, _ := Choose(mustParse(t, "Q3_K_M"), []Input{v, v, v}, Options{Arch: "flux"})
	if got[0].Type != formats.Q5_K || got[1].Type != formats.Q5_K || got[2].Type != formats.Q4_K {
		t.Errorf("Q3_K_M V counting: %s %s %s", got[0].Type, got[1].Type, got[2].Type)
	}
	// Flux never-quantize list.
	got, _ = Choose(mustParse(t, "Q4_K_M"), []Input{{"img_in.weight", []int64{3072, 64}, formats.BF16}}, Options{Arch: "flux"})
	if got[0].Type != formats.BF16 || got[0].Quantized {
		t.Errorf("img_in: %+v", got[0])
	}
}

func TestQwenFirstLastBlock(t *testing.T) {
	var in []Input
	for _, b := range []string{"0", "1", "2"} {
		in = append(in, Input{"transformer_blocks." + b + ".img_mlp.net.0.proj.weight", []int64{12288, 3072}, formats.BF16})
	}
	got, _ := Choose(mustParse(t, "Q4_K_M"), in, Options{Arch: "qwen_image"})
	if got[0].Type != formats.Q5_K || got[1].Type != formats.Q4_K || got[2].Type != formats.Q5_K {
		t.Errorf("qwen blocks: %s %s %s", got[0].Type, got[1].Type, got[2].Type)
	}
}

func TestFallback(t *testing.T) {
	for _, c := range []struct {
		t    formats.DType
		n    int64
		want formats.DType
	}{
		{formats.Q4_K, 320, formats.Q5_0}, {formats.Q5_K, 320, formats.Q5_1}, {formats.Q6_K, 96, formats.Q8_0},
		{formats.Q2_K, 320, formats.IQ4_NL}, {formats.TQ1_0, 64, formats.Q4_0}, {formats.Q4_K, 40, formats.F16},
		{formats.Q4_K, 512, formats.Q4_K}, {formats.Q8_0, 40, formats.F16},
	} {
		if got := fallback(c.t, c.n); got != c.want {
			t.Errorf("fallback(%s, %d) = %s, want %s", c.t, c.n, got, c.want)
		}
	}
}

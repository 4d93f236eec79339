package lora

import (
	"strings"
	"sync"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/names"
)

var (
	fuzzBaseOnce sync.Once
	fuzzBases    []*Base
)

func fuzzTestBases(t testing.TB) []*Base {
	fuzzBaseOnce.Do(func() {
		var l nameShapes
		l.add("model.diffusion_model.input_blocks.1.1.proj_in.weight", 8, 8, 1, 1)
		l.add("model.diffusion_model.input_blocks.1.0.in_layers.2.weight", 8, 4, 3, 3)
		l.add("cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight", 8, 8)
		l.add("model.diffusion_model.middle_block.1.proj_in.bias", 8)
		sd1, err := NewBase(l, names.SD1, "")
		if err != nil {
			panic(err)
		}
		var f nameShapes
		f.add("double_blocks.0.img_attn.qkv.weight", 24, 8)
		f.add("double_blocks.0.img_attn.proj.weight", 8, 8)
		f.add("single_blocks.0.linear1.weight", 40, 8)
		f.add("conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight", 24, 8)
		flux, err := NewBase(f, names.Flux, "model.diffusion_model.")
		if err != nil {
			panic(err)
		}
		fuzzBases = []*Base{sd1, flux}
	})
	return fuzzBases
}

// FuzzParseKey checks that any key splits into module and suffix without
// panicking, and that resolving its module against two bases (the key
// parser's second half) terminates with a hit or an error.
func FuzzParseKey(f *testing.F) {
	for _, k := range []string{
		"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight",
		"lora_te_text_model_encoder_layers_0_self_attn_q_proj.alpha",
		"transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight",
		"lycoris_blocks_18_attn1_to_k.lokr_w1",
		"double_blocks.0.processor.qkv_lora1.down.weight",
		"unet.down_blocks.1.attentions.1.transformer_blocks.1.attn1.processor.to_q_lora.up.weight",
		"lora_unet__diffusion_model_blocks_0_self_attn_q.lora_down.weight",
		"base_model.model.transformer_blocks.0.attn.to_k.lora_B.default.weight",
		"lora_unet_blocks_22.self_attn.k.alpha",
		"x.diff_b", ".alpha", "lora_unet_.lora_up.weight", "____________________.lora_up.weight",
	} {
		f.Add(k)
	}
	bases := fuzzTestBases(f)
	f.Fuzz(func(t *testing.T, key string) {
		mod, role, ok := ParseKey(key)
		if !ok {
			return
		}
		if mod == "" || !strings.HasPrefix(key, mod) || role == RoleNone {
			t.Fatalf("ParseKey(%q) = %q, %v", key, mod, role)
		}
		for _, b := range bases {
			h, err := b.resolve(&Layer{Module: mod, Bias: role == RoleDiffBias})
			if err == nil {
				if _, ok := b.groups[h.group]; !ok {
					t.Fatalf("%q resolved to %q, not a base group", key, h.group)
				}
			}
		}
	})
}

// FuzzAdapter builds adapters of arbitrary factor shapes on one module and
// runs them through Read, Match and AddTo: every inconsistent shape must be
// an error, never a panic or an out-of-range access in the row kernels.
func FuzzAdapter(f *testing.F) {
	f.Add(uint8(0), []byte{2, 8, 2, 2, 2, 8, 2, 0})
	f.Add(uint8(1), []byte{2, 8, 1, 2, 1, 8, 2, 8, 1, 2, 1, 8})
	f.Add(uint8(2), []byte{2, 2, 1, 2, 4, 8})
	f.Add(uint8(3), []byte{4, 8, 4, 3, 3})
	f.Add(uint8(4), []byte{2, 24, 2, 2, 2, 8})
	roles := []Role{RoleUp, RoleDown, RoleMid, RoleAlpha, RoleDoRA, RoleDiff, RoleDiffBias,
		RoleHadaW1A, RoleHadaW1B, RoleHadaW2A, RoleHadaW2B, RoleHadaT1, RoleHadaT2,
		RoleLoKrW1, RoleLoKrW1A, RoleLoKrW1B, RoleLoKrW2, RoleLoKrW2A, RoleLoKrW2B, RoleLoKrT2, RoleScale}
	suffixOf := map[Role]string{}
	for _, s := range suffixes {
		if _, ok := suffixOf[s.role]; !ok && s.needs == "" {
			suffixOf[s.role] = s.text
		}
	}
	modules := []string{"lora_unet_down_blocks_0_attentions_0_proj_in", "lora_unet_down_blocks_0_resnets_0_conv1",
		"lora_unet_double_blocks_0_img_attn_qkv", "transformer.single_transformer_blocks.0.attn.to_k",
		"lora_te2_text_model_encoder_layers_0_self_attn_v_proj"}
	bases := fuzzTestBases(f)
	f.Fuzz(func(t *testing.T, sel uint8, spec []byte) {
		mod := modules[int(sel)%len(modules)]
		m := newMem("fuzz.safetensors")
		used := map[Role]bool{}
		// spec: [kind role, ndim, dims...] repeated, dims 1..32.
		for len(spec) >= 2 && len(m.list) < 6 {
			role := roles[int(spec[0])%len(roles)]
			nd := int(spec[1]) % 5
			spec = spec[2:]
			if nd > len(spec) {
				break
			}
			shape := make([]int64, nd)
			for i := range shape {
				shape[i] = int64(spec[i]%32) + 1
			}
			spec = spec[nd:]
			if used[role] || prod(shape) > 4096 {
				continue
			}
			used[role] = true
			vals := make([]float32, prod(shape))
			for i := range vals {
				vals[i] = float32(i%7) - 3
			}
			m.add(mod+suffixOf[role], formats.F32, shape, vals)
		}
		a, err := Read(m)
		if err != nil {
			return
		}
		for _, b := range bases {
			p, err := b.Match(Use{Adapter: a, Strength: 0.5})
			if err != nil {
				continue
			}
			for _, tg := range p.Targets {
				dst := make([]float32, tg.Rows*tg.RowElems)
				if err := tg.AddTo(dst, 0); err != nil && !strings.Contains(err.Error(), "LoKr factors") {
					t.Fatalf("AddTo after a successful match: %v", err)
				}
				if len(dst) > 3 {
					_ = tg.AddTo(dst[1:len(dst)-1], 1)
				}
				tg.Release()
			}
		}
	})
}

func TestParseKeySuffixes(t *testing.T) {
	for _, c := range []struct {
		key, module string
		role        Role
	}{
		{"m.lora_up.weight", "m", RoleUp}, {"m.lora_down.weight", "m", RoleDown}, {"m.lora_mid.weight", "m", RoleMid},
		{"m.lora.up.weight", "m", RoleUp}, {"m.lora.down.weight", "m", RoleDown},
		{"p.to_q_lora.up.weight", "p.to_q", RoleUp}, {"p.to_q_lora.down.weight", "p.to_q", RoleDown},
		{"m.lora_B.weight", "m", RoleUp}, {"m.lora_A.weight", "m", RoleDown},
		{"m.lora_B.default.weight", "m", RoleUp}, {"m.lora_A.default.weight", "m", RoleDown},
		{"m.lora_B", "m", RoleUp}, {"m.lora_A", "m", RoleDown},
		{"m.lora_linear_layer.up.weight", "m", RoleUp}, {"m.lora_linear_layer.down.weight", "m", RoleDown},
		{"m.alpha", "m", RoleAlpha}, {"m.scale", "m", RoleScale}, {"m.dora_scale", "m", RoleDoRA},
		{"m.lora_magnitude_vector", "m", RoleDoRA},
		{"m.diff", "m", RoleDiff}, {"m.diff_b", "m", RoleDiffBias}, {"m.w_norm", "m", RoleDiff}, {"m.b_norm", "m", RoleDiffBias},
		{"m.hada_w1_a", "m", RoleHadaW1A}, {"m.hada_w1_b", "m", RoleHadaW1B}, {"m.hada_w2_a", "m", RoleHadaW2A},
		{"m.hada_w2_b", "m", RoleHadaW2B}, {"m.hada_t1", "m", RoleHadaT1}, {"m.hada_t2", "m", RoleHadaT2},
		{"m.lokr_w1", "m", RoleLoKrW1}, {"m.lokr_w1_a", "m", RoleLoKrW1A}, {"m.lokr_w1_b", "m", RoleLoKrW1B},
		{"m.lokr_w2", "m", RoleLoKrW2}, {"m.lokr_w2_a", "m", RoleLoKrW2A}, {"m.lokr_w2_b", "m", RoleLoKrW2B},
		{"m.lokr_t2", "m", RoleLoKrT2},
		{"double_blocks.0.processor.qkv_lora1.up.weight", "double_blocks.0.processor.qkv_lora1", RoleUp},
		{"lora.model.diffusion_model.x.weight.lora_up", "lora.model.diffusion_model.x.weight", RoleUp},
		{"m.on_input", "m", RoleRefused}, {"m.oft_blocks", "m", RoleRefused}, {"m.a1.weight", "m", RoleRefused},
	} {
		mod, role, ok := ParseKey(c.key)
		if !ok || mod != c.module || role != c.role {
			t.Errorf("ParseKey(%q) = %q, %v, %v; want %q, %v", c.key, mod, role, ok, c.module, c.role)
		}
	}
	for _, k := range []string{"model.diffusion_model.x.weight", "ff.down.weight", ".alpha", "lora_up.weight"} {
		if m, r, ok := ParseKey(k); ok {
			t.Errorf("ParseKey(%q) = %q, %v: not an adapter key", k, m, r)
		}
	}
}

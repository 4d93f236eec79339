package lora

import (
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// On full-size tensor lists of real architectures, every weight a LoRA can
// adapt gets a kohya name that this package's matching maps back to it
// (PlanExtract checks that for each layer) and that sd.cpp's conversion
// maps back too, except the few layers outside the blocks whose names
// sd.cpp's "_" rules cannot rebuild.
func TestPlanExtractFullSize(t *testing.T) {
	for _, c := range []struct {
		base      string
		layers    int
		notSDCpp  []string // substrings of the modules sd.cpp cannot load
		wantNamed []string
	}{
		{"sd1", 0, []string{"time_embedding", "conv_in", "conv_out"},
			[]string{"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q", "lora_unet_mid_block_resnets_1_conv2",
				"lora_unet_up_blocks_3_attentions_2_proj_out", "lora_te_text_model_encoder_layers_11_mlp_fc2"}},
		{"sdxl", 0, []string{"time_embed", "label_emb", "input_blocks_0_0", "out_2"},
			[]string{"lora_unet_input_blocks_4_1_transformer_blocks_1_attn2_to_k", "lora_unet_middle_block_1_transformer_blocks_9_ff_net_2",
				"lora_te1_text_model_encoder_layers_0_self_attn_q_proj", "lora_te2_text_model_encoder_layers_31_self_attn_v_proj",
				"lora_te2_text_model_encoder_layers_31_mlp_fc1"}},
		{"flux", 0, []string{"img_in", "txt_in", "time_in", "vector_in", "guidance_in", "final_layer"},
			[]string{"lora_unet_double_blocks_18_img_attn_qkv", "lora_unet_single_blocks_37_linear1", "lora_unet_double_blocks_0_txt_mod_lin"}},
	} {
		t.Run(c.base, func(t *testing.T) {
			b := testBase(t, c.base)
			tensors := make([]formats.Tensor, len(b.tensors))
			for i, bt := range b.tensors {
				tensors[i] = formats.Tensor{Name: bt.name, Shape: bt.shape, Type: formats.F16}
			}
			plan, err := PlanExtract(tensors, tensors, b.Version, b.Prefix)
			if err != nil {
				t.Fatal(err)
			}
			named := map[string]bool{}
			for _, l := range plan.Layers {
				named[l.Module] = true
				if !l.SDCpp {
					t.Logf("not sd.cpp: %s", l.Module)
				}
				if !l.SDCpp && !containsAny(l.Module, c.notSDCpp) {
					t.Errorf("%s: sd.cpp would not load it", l.Module)
				}
			}
			for _, n := range c.wantNamed {
				if !named[n] {
					t.Errorf("no layer %s", n)
				}
			}
			if len(named) != len(plan.Layers) {
				t.Errorf("%d layers, %d names: names repeat", len(plan.Layers), len(named))
			}
			for _, s := range plan.Skipped {
				if !strings.Contains(s, "embedding") && !strings.Contains(s, "not in the diffusion model") {
					t.Errorf("skipped %s", s)
				}
			}
			t.Logf("%s: %d layers", c.base, len(plan.Layers))
		})
	}
}

// The names extraction gives are the names kohya's scripts write: every
// module of the published kohya-format key lists is among them.
func TestExtractNamesAreKohyas(t *testing.T) {
	for _, c := range []struct{ base, list string }{
		{"sd1", "kohya_sd1_locon.txt"}, {"sd1", "kohya_sd1_te.txt"}, {"sd1", "lycoris_sd1_loha.txt"},
		{"sd1", "lycoris_sd1_full.txt"}, {"sd1", "kohya_sd1_loha_tucker.txt"},
		{"sdxl", "kohya_sdxl.txt"}, {"sdxl", "lycoris_sdxl_dora.txt"}, {"sdxl", "lycoris_sdxl_lokr_te2.txt"},
		{"flux", "kohya_flux.txt"}, {"flux_clip", "kohya_flux_te1.txt"}, {"wan14b", "musubi_wan_dora.txt"},
	} {
		b := testBase(t, c.base)
		tensors := make([]formats.Tensor, len(b.tensors))
		for i, bt := range b.tensors {
			tensors[i] = formats.Tensor{Name: bt.name, Shape: bt.shape, Type: formats.F16}
		}
		plan, err := PlanExtract(tensors, tensors, b.Version, b.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		named := map[string]bool{}
		for _, l := range plan.Layers {
			named[l.Module] = true
		}
		kl := readKeyList(t, "testdata/keys/"+c.list)
		for _, k := range kl.keys {
			if m, _, ok := ParseKey(k); ok && !named[m] {
				t.Errorf("%s: kohya writes %s, extraction does not", c.list, m)
			}
		}
	}
}

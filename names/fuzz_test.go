package names

import (
	"strings"
	"testing"
)

// FuzzConvert checks that Convert never panics, is deterministic, and that
// the guards that skip rule lists never change a result (the unguarded path
// runs every rule as sd.cpp does).
func FuzzConvert(f *testing.F) {
	for _, n := range []string{
		"unet.down_blocks.0.resnets.0.conv1.weight",
		"vae.decoder.mid_block.attentions.0.to_q.weight",
		"cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight",
		"cond_stage_model.model.transformer.resblocks.",
		"model.diffusion_model.transformer_blocks.0.attn.to_k.weight",
		"lora.lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight",
		"lora.lycoris_up_blocks_1_upsamplers_0_conv.hada_w2_b",
		"ip_adapter.-5.to_k_ip.weight",
		"ip_adapter.99999999999999999999.x.y",
		"controlnet_down_blocks.",
		"text_encoders.t5xxl.transformer.enc.blk.0.attn_q.weight",
		"text_encoders.llm.visual.v.patch_embd.weight.1",
		"first_stage_model.mid.attn_1.to_qto_q",
		"lora.",
		"",
	} {
		for _, v := range []Version{Unknown, SD1, SDXL, SD3, Flux, SDXS09} {
			f.Add(n, uint8(v))
		}
	}
	f.Fuzz(func(t *testing.T, name string, vb uint8) {
		v := Version(int(vb) % int(numVersions+1)) // one past the end too
		got := Convert(name, v)
		if again := Convert(name, v); again != got {
			t.Fatalf("Convert(%q, %v) not deterministic: %q then %q", name, v, got, again)
		}
		if slow := convert(name, v, false); slow != got {
			t.Fatalf("Convert(%q, %v) = %q, unguarded %q", name, v, got, slow)
		}
		if name != "" && got == "" && !strings.HasPrefix(name, "control_model.") {
			t.Fatalf("Convert(%q, %v) lost the whole name", name, v)
		}
	})
}

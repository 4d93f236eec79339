package names

import (
	"errors"
	"strings"
	"testing"
)

// convCase is one expected conversion. Every want was derived by hand from
// sd.cpp's src/name_conversion.cpp (convert_tensor_name and the helpers it
// calls); rule says which of its rules the case exercises.
type convCase struct {
	in   string
	v    Version
	want string
	rule string
}

func runCases(t *testing.T, cases []convCase) {
	t.Helper()
	for _, c := range cases {
		if got := Convert(c.in, c.v); got != c.want {
			t.Errorf("Convert(%q, %v) = %q, want %q  [%s]", c.in, c.v, got, c.want, c.rule)
		}
		if got := convert(c.in, c.v, false); got != c.want {
			t.Errorf("convert(%q, %v, unguarded) = %q, want %q  [%s]", c.in, c.v, got, c.want, c.rule)
		}
	}
}

func TestConvertPrefixes(t *testing.T) { runCases(t, prefixCases()) }

func prefixCases() []convCase {
	return []convCase{
		{"diffusion_model.input_blocks.0.0.weight", SD1, "model.diffusion_model.input_blocks.0.0.weight", "prefix diffusion_model."},
		{"transformer.double_blocks.0.img_attn.qkv.weight", Flux, "model.diffusion_model.double_blocks.0.img_attn.qkv.weight", "prefix transformer. (DiT)"},
		{"vae.decoder.conv_in.weight", SD1, "first_stage_model.decoder.conv_in.weight", "prefix vae."},
		{"text_encoder.text_model.final_layer_norm.bias", SD1, "cond_stage_model.transformer.text_model.final_layer_norm.bias", "prefix text_encoder."},
		{"te.text_model.embeddings.position_embedding.weight", SD1, "cond_stage_model.transformer.text_model.embeddings.position_embedding.weight", "prefix te."},
		{"te2.text_model.encoder.layers.0.mlp.fc1.weight", SDXL, "cond_stage_model.1.transformer.text_model.encoder.layers.0.mlp.fc1.weight", "prefix te2."},
		{"te3.encoder.block.0.layer.0.SelfAttention.q.weight", SD3, "text_encoders.t5xxl.transformer.encoder.block.0.layer.0.SelfAttention.q.weight", "prefix te3."},
		{"text_encoders.llm.text_embedding_projection.weight", Other, "text_embedding_projection.weight", "prefix text_encoders.llm.text_embedding_projection."},
		// Overlapping keys of sd.cpp's unordered_map: the observed winners (reference §8).
		{"text_encoder.2.x", SDXL, "cond_stage_model.transformer.2.x", "overlap: text_encoder. beats text_encoder.2."},
		{"conditioner.embedders.0.open_clip.x", SDXL, "cond_stage_model.x", "overlap: ...0.open_clip. beats ...0."},
		{"conditioner.embedders.0.transformer.text_model.encoder.layers.11.self_attn.k_proj.bias", SDXL,
			"cond_stage_model.transformer.text_model.encoder.layers.11.self_attn.k_proj.bias", "prefix conditioner.embedders.0."},
		// te1. depends on sd_version_is_flux only.
		{"te1.text_model.final_layer_norm.weight", Flux, "text_encoders.clip_l.transformer.text_model.final_layer_norm.weight", "te1. for Flux"},
		{"te1.text_model.final_layer_norm.weight", SD1, "cond_stage_model.transformer.text_model.final_layer_norm.weight", "te1. for a UNet"},
		{"te1.text_model.final_layer_norm.weight", SD3, "cond_stage_model.transformer.text_model.final_layer_norm.weight", "te1. outside Flux.1"},
		{"te1.text_model.final_layer_norm.weight", Flux2, "cond_stage_model.transformer.text_model.final_layer_norm.weight", "te1.: Flux.2 is not sd_version_is_flux"},
		// clip_l./clip_g. depend on sd_version_is_unet.
		{"clip_l.text_model.encoder.layers.3.layer_norm1.weight", SDXL, "cond_stage_model.transformer.text_model.encoder.layers.3.layer_norm1.weight", "clip_l. for a UNet"},
		{"clip_g.text_model.encoder.layers.3.layer_norm1.weight", SDXL, "cond_stage_model.1.transformer.text_model.encoder.layers.3.layer_norm1.weight", "clip_g. for a UNet"},
		{"clip_l.text_model.encoder.layers.3.layer_norm1.weight", SD3, "text_encoders.clip_l.transformer.text_model.encoder.layers.3.layer_norm1.weight", "clip_l. for a DiT"},
		{"clip_g.text_model.encoder.layers.3.layer_norm1.weight", Unknown, "text_encoders.clip_g.transformer.text_model.encoder.layers.3.layer_norm1.weight", "clip_g. without a version"},
		// The diffusers loader prefixes text_encoder_2 with "te.1."; only "te." matches.
		{"te.1.text_model.encoder.layers.0.self_attn.q_proj.weight", SDXL, "cond_stage_model.transformer.1.text_model.encoder.layers.0.self_attn.q_proj.weight", "te.1. is caught by te."},
		// Not a known prefix: unchanged.
		{"betas", SD1, "betas", "no rule"},
		{"", SD1, "", "empty name"},
		{"model_ema.decay", SD1, "model_ema.decay", "no rule"},
	}
}

func TestConvertSD1UNet(t *testing.T) { runCases(t, sd1UNetCases()) }

func sd1UNetCases() []convCase {
	p := "model.diffusion_model."
	return []convCase{
		{"unet.conv_in.weight", SD1, p + "input_blocks.0.0.weight", "stem: conv_in"},
		{"unet.conv_in.bias", SD2, p + "input_blocks.0.0.bias", "stem (SD2 shares SD1's rules)"},
		{"unet.time_embedding.linear_1.weight", SD1, p + "time_embed.0.weight", "stem: time embedding"},
		{"unet.time_embedding.linear_2.bias", SD1, p + "time_embed.2.bias", "stem: time embedding"},
		{"unet.conv_norm_out.weight", SD1, p + "out.0.weight", "head: norm"},
		{"unet.conv_out.bias", SD1, p + "out.2.bias", "head: conv"},
		{"unet.down_blocks.0.resnets.0.norm1.weight", SD1, p + "input_blocks.1.0.in_layers.0.weight", "resnet norm1 + down block 0.0"},
		{"unet.down_blocks.0.resnets.1.conv1.bias", SD1, p + "input_blocks.2.0.in_layers.2.bias", "resnet conv1 + down block 0.1"},
		{"unet.down_blocks.1.resnets.0.time_emb_proj.weight", SD1, p + "input_blocks.4.0.emb_layers.1.weight", "resnet time_emb_proj"},
		{"unet.down_blocks.1.resnets.0.conv_shortcut.weight", SD1, p + "input_blocks.4.0.skip_connection.weight", "resnet shortcut"},
		{"unet.down_blocks.2.resnets.1.norm2.weight", SD1, p + "input_blocks.8.0.out_layers.0.weight", "resnet norm2"},
		{"unet.down_blocks.3.resnets.1.conv2.weight", SD1, p + "input_blocks.11.0.out_layers.3.weight", "resnet conv2, level 3"},
		{"unet.down_blocks.0.attentions.0.proj_in.weight", SD1, p + "input_blocks.1.1.proj_in.weight", "down attention"},
		{"unet.down_blocks.2.attentions.1.transformer_blocks.0.attn2.to_k.weight", SD1, p + "input_blocks.8.1.transformer_blocks.0.attn2.to_k.weight", "down attention, inner names kept"},
		{"unet.down_blocks.0.downsamplers.0.conv.weight", SD1, p + "input_blocks.3.0.op.weight", "downsampler"},
		{"unet.down_blocks.2.downsamplers.0.conv.bias", SD1, p + "input_blocks.9.0.op.bias", "downsampler level 2"},
		{"unet.mid_block.resnets.0.norm1.bias", SD1, p + "middle_block.0.in_layers.0.bias", "mid resnet 0"},
		{"unet.mid_block.attentions.0.norm.weight", SD1, p + "middle_block.1.norm.weight", "mid attention"},
		{"unet.mid_block.resnets.1.conv2.weight", SD1, p + "middle_block.2.out_layers.3.weight", "mid resnet 1"},
		{"unet.up_blocks.0.resnets.2.conv_shortcut.bias", SD1, p + "output_blocks.2.0.skip_connection.bias", "up resnet"},
		{"unet.up_blocks.0.upsamplers.0.conv.weight", SD1, p + "output_blocks.2.1.conv.weight", "upsampler level 0 (no attention in SD1)"},
		{"unet.up_blocks.1.upsamplers.0.conv.weight", SD1, p + "output_blocks.5.2.conv.weight", "upsampler level 1"},
		{"unet.up_blocks.3.attentions.2.transformer_blocks.0.ff.net.0.proj.weight", SD1, p + "output_blocks.11.1.transformer_blocks.0.ff.net.0.proj.weight", "up attention level 3"},
		{"unet.up_blocks.0.attentions.1.proj_out.bias", SD1TinyUNet, p + "output_blocks.1.1.proj_out.bias", "up_blocks.0 attentions (tiny UNets)"},
		{"unet.up_blocks.2.attentions.0.transformer_blocks.0.attn1.to_out.weight", SD1, p + "output_blocks.6.1.transformer_blocks.0.attn1.to_out.0.weight", "to_out without the Sequential index"},
		{"unet.up_blocks.2.attentions.0.transformer_blocks.0.attn1.to_out.0.bias", SD1, p + "output_blocks.6.1.transformer_blocks.0.attn1.to_out.0.bias", "to_out.0 kept"},
		// Without the family, only the prefix changes.
		{"unet.down_blocks.0.resnets.0.conv1.weight", Unknown, p + "down_blocks.0.resnets.0.conv1.weight", "no version: prefix only"},
		{"unet.down_blocks.0.resnets.0.conv1.weight", Flux, p + "down_blocks.0.resnets.0.conv1.weight", "Flux rules leave UNet names"},
	}
}

func TestConvertSDXLUNet(t *testing.T) { runCases(t, sdxlUNetCases()) }

func sdxlUNetCases() []convCase {
	p := "model.diffusion_model."
	return []convCase{
		{"unet.add_embedding.linear_1.weight", SDXL, p + "label_emb.0.0.weight", "SDXL stem: add_embedding"},
		{"unet.add_embedding.linear_2.bias", SDXL, p + "label_emb.0.2.bias", "SDXL stem: add_embedding"},
		{"unet.add_embedding.linear_1.weight", SD1, p + "add_embedding.linear_1.weight", "add_embedding is SDXL-only"},
		{"unet.down_blocks.0.resnets.1.conv1.weight", SDXL, p + "input_blocks.2.0.in_layers.2.weight", "down resnet"},
		{"unet.down_blocks.1.attentions.0.transformer_blocks.1.attn1.to_q.weight", SDXL, p + "input_blocks.4.1.transformer_blocks.1.attn1.to_q.weight", "down attention level 1"},
		{"unet.down_blocks.2.attentions.1.transformer_blocks.9.norm3.bias", SDXL, p + "input_blocks.8.1.transformer_blocks.9.norm3.bias", "down attention level 2, deep"},
		{"unet.down_blocks.0.downsamplers.0.conv.weight", SDXL, p + "input_blocks.3.0.op.weight", "downsampler level 0"},
		{"unet.down_blocks.1.downsamplers.0.conv.bias", SDXL, p + "input_blocks.6.0.op.bias", "downsampler level 1"},
		{"unet.mid_block.attentions.0.transformer_blocks.9.ff.net.2.weight", SDXL, p + "middle_block.1.transformer_blocks.9.ff.net.2.weight", "mid attention"},
		{"unet.up_blocks.0.attentions.2.proj_out.weight", SDXL, p + "output_blocks.2.1.proj_out.weight", "up attention level 0"},
		{"unet.up_blocks.0.upsamplers.0.conv.weight", SDXL, p + "output_blocks.2.2.conv.weight", "upsampler level 0 + the 2.1->2.2 fix-up"},
		{"unet.up_blocks.1.upsamplers.0.conv.bias", SDXL, p + "output_blocks.5.2.conv.bias", "upsampler level 1"},
		{"unet.up_blocks.1.resnets.0.conv_shortcut.weight", SDXL, p + "output_blocks.3.0.skip_connection.weight", "up resnet shortcut"},
		{"unet.up_blocks.2.resnets.2.conv2.weight", SDXL, p + "output_blocks.8.0.out_layers.3.weight", "up resnet level 2"},
		{"unet.up_blocks.2.attentions.0.proj_in.weight", SDXL, p + "up_blocks.2.attentions.0.proj_in.weight", "SDXL's up_blocks.2 has no attention rule"},
		{"unet.up_blocks.1.attentions.2.transformer_blocks.1.attn2.to_v.weight", SDXLSSD1B, p + "output_blocks.5.1.transformer_blocks.1.attn2.to_v.weight", "SSD-1B uses the SDXL rules"},
		// SDXL LDM text encoders.
		{"conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight", SDXL, "cond_stage_model.1.transformer.text_model.encoder.layers.0.self_attn.in_proj.weight", "open_clip in_proj kept fused"},
		{"conditioner.embedders.1.model.transformer.resblocks.31.mlp.c_fc.bias", SDXL, "cond_stage_model.1.transformer.text_model.encoder.layers.31.mlp.fc1.bias", "open_clip mlp"},
		{"conditioner.embedders.1.model.text_projection", SDXL, "cond_stage_model.1.transformer.text_model.text_projection", "open_clip projection"},
		{"conditioner.embedders.1.model.ln_final.weight", SDXL, "cond_stage_model.1.transformer.text_model.final_layer_norm.weight", "open_clip final norm"},
		{"conditioner.embedders.1.model.positional_embedding", SDXL, "cond_stage_model.1.transformer.text_model.embeddings.position_embedding.weight", "open_clip positions"},
		{"conditioner.embedders.1.model.logit_scale", SDXL, "cond_stage_model.1.model.logit_scale", "open_clip: no rule"},
	}
}

func TestConvertVAE(t *testing.T) { runCases(t, vaeCases()) }

func vaeCases() []convCase {
	f := "first_stage_model."
	return []convCase{
		{"vae.encoder.conv_in.weight", SD1, f + "encoder.conv_in.weight", "same in both layouts"},
		{"vae.encoder.down_blocks.0.resnets.0.norm1.weight", SD1, f + "encoder.down.0.block.0.norm1.weight", "encoder resnet"},
		{"vae.encoder.down_blocks.1.resnets.0.conv_shortcut.weight", SD1, f + "encoder.down.1.block.0.nin_shortcut.weight", "shortcut rename"},
		{"vae.encoder.down_blocks.3.resnets.1.conv2.bias", SD1, f + "encoder.down.3.block.1.conv2.bias", "encoder level 3"},
		{"vae.encoder.down_blocks.2.downsamplers.0.conv.weight", SD1, f + "encoder.down.2.downsample.conv.weight", "downsampler"},
		{"vae.encoder.mid_block.resnets.1.norm2.weight", SD1, f + "encoder.mid.block_2.norm2.weight", "mid resnet"},
		{"vae.encoder.conv_norm_out.bias", SD1, f + "encoder.norm_out.bias", "conv_norm_out -> norm_out"},
		{"vae.decoder.up_blocks.0.resnets.0.conv1.weight", SD1, f + "decoder.up.3.block.0.conv1.weight", "decoder levels reversed"},
		{"vae.decoder.up_blocks.3.resnets.2.norm1.bias", SD1, f + "decoder.up.0.block.2.norm1.bias", "decoder level 3 -> up.0"},
		{"vae.decoder.up_blocks.2.resnets.0.conv_shortcut.bias", SD1, f + "decoder.up.1.block.0.nin_shortcut.bias", "decoder shortcut"},
		{"vae.decoder.up_blocks.0.upsamplers.0.conv.weight", SD1, f + "decoder.up.3.upsample.conv.weight", "upsampler"},
		{"vae.decoder.up_blocks.2.upsamplers.0.conv.bias", SD1, f + "decoder.up.1.upsample.conv.bias", "upsampler level 2"},
		// Attention, old diffusers names.
		{"vae.decoder.mid_block.attentions.0.group_norm.weight", SD1, f + "decoder.mid.attn_1.norm.weight", "attention norm (old)"},
		{"vae.decoder.mid_block.attentions.0.query.weight", SD1, f + "decoder.mid.attn_1.q.weight", "attention query (old)"},
		{"vae.encoder.mid_block.attentions.0.key.bias", SD1, f + "encoder.mid.attn_1.k.bias", "attention key (old)"},
		{"vae.encoder.mid_block.attentions.0.value.weight", SD1, f + "encoder.mid.attn_1.v.weight", "attention value (old)"},
		{"vae.decoder.mid_block.attentions.0.proj_attn.bias", SD1, f + "decoder.mid.attn_1.proj_out.bias", "attention proj (old)"},
		// Attention, new diffusers names.
		{"vae.decoder.mid_block.attentions.0.to_q.weight", SD1, f + "decoder.mid.attn_1.q.weight", "attention to_q (new)"},
		{"vae.decoder.mid_block.attentions.0.to_k.bias", SDXL, f + "decoder.mid.attn_1.k.bias", "attention to_k (new)"},
		{"vae.encoder.mid_block.attentions.0.to_v.weight", Flux, f + "encoder.mid.attn_1.v.weight", "attention to_v (new, Flux VAE)"},
		{"vae.encoder.mid_block.attentions.0.to_out.0.weight", SD1, f + "encoder.mid.attn_1.proj_out.weight", "attention to_out.0 (new)"},
		{"vae.quant_conv.weight", SD1, f + "quant_conv.weight", "top-level quant conv"},
		{"vae.encoder.quant_conv.weight", SD1, f + "quant_conv.weight", "encoder.quant_conv. prefix"},
		{"vae.decoder.post_quant_conv.bias", SD1, f + "post_quant_conv.bias", "decoder.post_quant_conv. prefix"},
		// LDM names already right.
		{"first_stage_model.decoder.mid.attn_1.proj_out.weight", SD1, f + "decoder.mid.attn_1.proj_out.weight", "LDM kept"},
		{"first_stage_model.encoder.down.0.block.1.nin_shortcut.weight", SD1, f + "encoder.down.0.block.1.nin_shortcut.weight", "LDM kept"},
		// The VAE rules do not depend on the version, and SDXS keeps its VAE under tae.
		{"vae.decoder.up_blocks.0.resnets.0.conv1.weight", Unknown, f + "decoder.up.3.block.0.conv1.weight", "VAE rules without a version"},
		{"vae.decoder.conv_in.weight", SDXS512DS, "tae.decoder.conv_in.weight", "SDXS: tae."},
		{"first_stage_model.decoder.conv_in.weight", SDXS09, "tae.decoder.conv_in.weight", "SDXS: tae."},
	}
}

func TestConvertTextEncoders(t *testing.T) { runCases(t, textEncoderCases()) }

func textEncoderCases() []convCase {
	c := "cond_stage_model."
	return []convCase{
		// HF CLIP names are kept.
		{"cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight", SD1, c + "transformer.text_model.encoder.layers.0.self_attn.q_proj.weight", "HF CLIP kept"},
		{"te.text_model.encoder.layers.11.mlp.fc2.bias", SD1, c + "transformer.text_model.encoder.layers.11.mlp.fc2.bias", "HF CLIP under te."},
		// open_clip (SD 2.x) -> HF CLIP.
		{"cond_stage_model.model.transformer.resblocks.22.mlp.c_proj.bias", SD2, c + "transformer.text_model.encoder.layers.22.mlp.fc2.bias", "open_clip c_proj"},
		{"cond_stage_model.model.transformer.resblocks.0.ln_1.weight", SD2, c + "transformer.text_model.encoder.layers.0.layer_norm1.weight", "open_clip ln_1"},
		{"cond_stage_model.model.transformer.resblocks.0.ln_2.bias", SD2, c + "transformer.text_model.encoder.layers.0.layer_norm2.bias", "open_clip ln_2"},
		{"cond_stage_model.model.transformer.resblocks.7.attn.in_proj_bias", SD2, c + "transformer.text_model.encoder.layers.7.self_attn.in_proj.bias", "open_clip in_proj (split at load, not here)"},
		{"cond_stage_model.model.transformer.resblocks.7.attn.out_proj.weight", SD2, c + "transformer.text_model.encoder.layers.7.self_attn.out_proj.weight", "open_clip out_proj"},
		{"cond_stage_model.model.ln_final.bias", SD2, c + "transformer.text_model.final_layer_norm.bias", "open_clip whole name"},
		{"cond_stage_model.model.text_projection", SD2, c + "transformer.text_model.text_projection", "open_clip whole name"},
		{"cond_stage_model.model.token_embedding.weight", SD2, c + "transformer.text_model.embeddings.token_embedding.weight", "open_clip whole name"},
		{"cond_stage_model.model.positional_embedding", SD2, c + "transformer.text_model.embeddings.position_embedding.weight", "open_clip whole name"},
		{"cond_stage_model.model.transformer.resblocks.5", SD2, c + "model.transformer.resblocks.5", "block without inner name: kept (sd.cpp throws)"},
		{"cond_stage_model.model.transformer.resblocks.5.attn.bogus", SD2, c + "model.transformer.resblocks.5.attn.bogus", "unknown inner name kept"},
		{"cond_stage_model.model.visual.transformer.resblocks.3.attn.out_proj.weight", SD2, c + "transformer.vision_model.encoder.layers.3.self_attn.out_proj.weight", "open_clip vision tower"},
		{"cond_stage_model.model.visual.proj", SD2, c + "transformer.visual_projection.weight", "open_clip vision projection"},
		{"cond_stage_model.model.visual.conv1.weight", SD2, c + "transformer.vision_model.embeddings.patch_embedding.weight", "open_clip patch embedding"},
		{"clip_vision.vision_model.pre_layrnorm.weight", SD1, c + "transformer.vision_model.pre_layernorm.weight", "HF spelling pre_layrnorm fixed"},
		{"cond_stage_model.transformer.vision_model.visual_projection.weight", SD1, c + "transformer.visual_projection.weight", "visual projection"},
		{"te.text_projection.weight", SD1, c + "transformer.text_model.text_projection", "text projection"},
		{"text_encoders.clip_l.transformer.text_projection.weight", Flux, "text_encoders.clip_l.transformer.text_model.text_projection", "text projection under text_encoders."},
		{"text_encoders.clip_g.transformer.text_model.encoder.layers.31.self_attn.v_proj.weight", SD3, "text_encoders.clip_g.transformer.text_model.encoder.layers.31.self_attn.v_proj.weight", "HF CLIP kept"},
		// llama.cpp GGUF T5 -> HF T5.
		{"text_encoders.t5xxl.transformer.enc.blk.0.attn_q.weight", Flux, "text_encoders.t5xxl.transformer.encoder.block.0.layer.0.SelfAttention.q.weight", "T5 attn_q"},
		{"text_encoders.t5xxl.transformer.enc.blk.23.attn_o.weight", Flux, "text_encoders.t5xxl.transformer.encoder.block.23.layer.0.SelfAttention.o.weight", "T5 attn_o"},
		{"text_encoders.t5xxl.transformer.enc.blk.0.attn_rel_b.weight", Flux, "text_encoders.t5xxl.transformer.encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "T5 relative bias"},
		{"text_encoders.t5xxl.transformer.enc.blk.3.ffn_gate.weight", SD3, "text_encoders.t5xxl.transformer.encoder.block.3.layer.1.DenseReluDense.wi_0.weight", "T5 ffn_gate"},
		{"text_encoders.t5xxl.transformer.enc.blk.3.ffn_up.weight", SD3, "text_encoders.t5xxl.transformer.encoder.block.3.layer.1.DenseReluDense.wi_1.weight", "T5 ffn_up"},
		{"text_encoders.t5xxl.transformer.enc.blk.3.ffn_down.weight", SD3, "text_encoders.t5xxl.transformer.encoder.block.3.layer.1.DenseReluDense.wo.weight", "T5 ffn_down"},
		{"text_encoders.t5xxl.transformer.enc.blk.3.attn_norm.weight", SD3, "text_encoders.t5xxl.transformer.encoder.block.3.layer.0.layer_norm.weight", "T5 attn_norm"},
		{"text_encoders.t5xxl.transformer.enc.blk.3.ffn_norm.weight", SD3, "text_encoders.t5xxl.transformer.encoder.block.3.layer.1.layer_norm.weight", "T5 ffn_norm"},
		{"text_encoders.t5xxl.transformer.enc.output_norm.weight", Flux, "text_encoders.t5xxl.transformer.encoder.final_layer_norm.weight", "T5 output_norm"},
		{"text_encoders.t5xxl.transformer.token_embd.weight", Flux, "text_encoders.t5xxl.transformer.shared.weight", "T5 token_embd"},
		{"text_encoders.t5xxl.transformer.encoder.block.0.layer.1.DenseReluDense.wi_0.weight", Flux, "text_encoders.t5xxl.transformer.encoder.block.0.layer.1.DenseReluDense.wi_0.weight", "HF T5 kept"},
		// llama.cpp GGUF LLM -> HF.
		{"text_encoders.llm.blk.0.attn_q.weight", Other, "text_encoders.llm.model.layers.0.self_attn.q_proj.weight", "LLM attn_q"},
		{"text_encoders.llm.blk.0.attn_q_norm.weight", Other, "text_encoders.llm.model.layers.0.self_attn.q_norm.weight", "LLM attn_q_norm"},
		{"text_encoders.llm.blk.5.attn_output.weight", Other, "text_encoders.llm.model.layers.5.self_attn.o_proj.weight", "LLM attn_output"},
		{"text_encoders.llm.blk.5.attn_norm.weight", Other, "text_encoders.llm.model.layers.5.input_layernorm.weight", "LLM attn_norm"},
		{"text_encoders.llm.blk.5.ffn_norm.weight", Other, "text_encoders.llm.model.layers.5.post_attention_layernorm.weight", "LLM ffn_norm"},
		{"text_encoders.llm.blk.2.ffn_gate_inp.weight", Other, "text_encoders.llm.model.layers.2.mlp.router.weight", "LLM router before ffn_gate"},
		{"text_encoders.llm.blk.2.ffn_down_exps.weight", Other, "text_encoders.llm.model.layers.2.mlp.experts.down_proj.weight", "LLM experts before ffn_down"},
		{"text_encoders.llm.token_embd.weight", Other, "text_encoders.llm.model.embed_tokens.weight", "LLM token_embd"},
		{"text_encoders.llm.output_norm.weight", Other, "text_encoders.llm.model.norm.weight", "LLM output_norm"},
		{"text_encoders.llm.model.layers.0.mlp.experts.gate_proj", Other, "text_encoders.llm.model.layers.0.mlp.experts.gate_proj.weight", "bare expert parameter"},
		{"text_encoders.llm.model.language_model.layers.1.attention.dense.weight", Other, "text_encoders.llm.model.layers.1.self_attn.o_proj.weight", "LLaDA2 layout"},
		{"text_encoders.llm.model.layers.0.self_attn.q_proj.weight", Other, "text_encoders.llm.model.layers.0.self_attn.q_proj.weight", "HF LLM kept"},
		{"text_encoders.llm.visual.v.blk.0.attn_q.weight", Other, "text_encoders.llm.visual.blocks.0.attn.q_proj.weight", "LLM vision tower"},
		{"text_encoders.llm.visual.mm.0.weight", Other, "text_encoders.llm.visual.merger.mlp.0.weight", "LLM vision merger"},
	}
}

func TestConvertFlux(t *testing.T) { runCases(t, fluxCases()) }

func fluxCases() []convCase {
	p := "model.diffusion_model."
	return []convCase{
		{p + "transformer_blocks.0.attn.to_q.weight", Flux, p + "double_blocks.0.img_attn.qkv.weight", "double: to_q is qkv part 0"},
		{p + "transformer_blocks.0.attn.to_k.bias", Flux, p + "double_blocks.0.img_attn.qkv.bias.1", "double: to_k is qkv part 1 (fused at load)"},
		{p + "transformer_blocks.7.attn.to_v.weight", Flux, p + "double_blocks.7.img_attn.qkv.weight.2", "double: to_v is qkv part 2"},
		{p + "transformer_blocks.7.attn.add_q_proj.bias", Flux, p + "double_blocks.7.txt_attn.qkv.bias", "double: text q"},
		{p + "transformer_blocks.7.attn.add_v_proj.weight", Flux, p + "double_blocks.7.txt_attn.qkv.weight.2", "double: text v"},
		{p + "transformer_blocks.18.attn.norm_added_k.weight", Flux, p + "double_blocks.18.txt_attn.norm.key_norm.scale", "double: text k norm"},
		{p + "transformer_blocks.3.attn.norm_q.weight", Flux, p + "double_blocks.3.img_attn.norm.query_norm.scale", "double: q norm"},
		{p + "transformer_blocks.3.norm1.linear.weight", Flux, p + "double_blocks.3.img_mod.lin.weight", "double: img modulation"},
		{p + "transformer_blocks.3.norm1_context.linear.bias", Flux, p + "double_blocks.3.txt_mod.lin.bias", "double: txt modulation"},
		{p + "transformer_blocks.3.ff.net.0.proj.weight", Flux, p + "double_blocks.3.img_mlp.0.weight", "double: img mlp in"},
		{p + "transformer_blocks.3.ff_context.net.2.bias", Flux, p + "double_blocks.3.txt_mlp.2.bias", "double: txt mlp out"},
		{p + "transformer_blocks.3.attn.to_out.0.weight", Flux, p + "double_blocks.3.img_attn.proj.weight", "double: img proj"},
		{p + "transformer_blocks.3.attn.to_add_out.bias", Flux, p + "double_blocks.3.txt_attn.proj.bias", "double: txt proj"},
		{p + "transformer_blocks.19.attn.to_q.weight", Flux, p + "transformer_blocks.19.attn.to_q.weight", "only 19 double blocks are listed"},
		{p + "single_transformer_blocks.0.attn.to_q.weight", Flux, p + "single_blocks.0.linear1.weight", "single: q is linear1 part 0"},
		{p + "single_transformer_blocks.0.attn.to_k.weight", Flux, p + "single_blocks.0.linear1.weight.1", "single: k part 1"},
		{p + "single_transformer_blocks.0.attn.to_v.bias", Flux, p + "single_blocks.0.linear1.bias.2", "single: v part 2"},
		{p + "single_transformer_blocks.37.proj_mlp.weight", Flux, p + "single_blocks.37.linear1.weight.3", "single: mlp part 3"},
		{p + "single_transformer_blocks.37.proj_out.bias", Flux, p + "single_blocks.37.linear2.bias", "single: proj_out"},
		{p + "single_transformer_blocks.5.norm.linear.weight", Flux, p + "single_blocks.5.modulation.lin.weight", "single: modulation"},
		{p + "single_transformer_blocks.5.attn.norm_k.weight", Flux, p + "single_blocks.5.norm.key_norm.scale", "single: k norm"},
		{p + "single_transformer_blocks.38.attn.to_q.weight", Flux2, p + "single_transformer_blocks.38.attn.to_q.weight", "only 38 single blocks are listed"},
		{p + "time_text_embed.timestep_embedder.linear_1.weight", Flux, p + "time_in.in_layer.weight", "time embedding"},
		{p + "time_text_embed.guidance_embedder.linear_2.bias", Flux, p + "guidance_in.out_layer.bias", "guidance embedding"},
		{p + "time_text_embed.text_embedder.linear_1.bias", Flux, p + "vector_in.in_layer.bias", "pooled text embedding"},
		{p + "time_embed.timestep_embedder.linear_2.weight", LongCat, p + "time_in.out_layer.weight", "LongCat time embedding"},
		{p + "x_embedder.weight", Flux, p + "img_in.weight", "image in"},
		{p + "context_embedder.bias", Flux, p + "txt_in.bias", "text in"},
		{p + "norm_out.linear.weight", Flux, p + "final_layer.adaLN_modulation.1.weight", "final modulation"},
		{p + "proj_out.weight", Flux, p + "final_layer.linear.weight", "final linear"},
		{"transformer.x_embedder.weight", FluxFill, p + "img_in.weight", "transformer. prefix + Flux rules"},
		{p + "double_blocks.3.img_attn.norm.query_norm.weight", LongCat, p + "double_blocks.3.img_attn.norm.query_norm.scale", "LongCat RMSNorm stored as .weight"},
		{p + "single_blocks.3.norm.key_norm.weight", Flux, p + "single_blocks.3.norm.key_norm.scale", "LongCat RMSNorm stored as .weight"},
		// Original (BFL) names are kept.
		{p + "double_blocks.0.img_attn.qkv.weight", Flux, p + "double_blocks.0.img_attn.qkv.weight", "BFL kept"},
		{p + "double_blocks.0.img_attn.norm.query_norm.scale", Flux, p + "double_blocks.0.img_attn.norm.query_norm.scale", "BFL kept"},
		{p + "single_blocks.37.linear1.weight", Flux, p + "single_blocks.37.linear1.weight", "BFL kept"},
		{p + "final_layer.adaLN_modulation.1.weight", Flux, p + "final_layer.adaLN_modulation.1.weight", "BFL kept"},
		{p + "guidance_in.in_layer.weight", Flux, p + "guidance_in.in_layer.weight", "BFL kept"},
		{p + "img_in.weight", Flux, p + "img_in.weight", "BFL kept"},
		// The Flux table is not used for other families.
		{p + "transformer_blocks.0.attn.to_q.weight", Unknown, p + "transformer_blocks.0.attn.to_q.weight", "no version"},
	}
}

func TestConvertSD3(t *testing.T) { runCases(t, sd3Cases()) }

func sd3Cases() []convCase {
	p := "model.diffusion_model."
	return []convCase{
		{p + "transformer_blocks.0.attn.to_q.weight", SD3, p + "joint_blocks.0.x_block.attn.qkv.weight", "x q"},
		{p + "transformer_blocks.0.attn.to_k.bias", SD3, p + "joint_blocks.0.x_block.attn.qkv.bias.1", "x k"},
		{p + "transformer_blocks.0.attn.add_v_proj.weight", SD3, p + "joint_blocks.0.context_block.attn.qkv.weight.2", "context v"},
		{p + "transformer_blocks.4.attn2.to_k.bias", SD3, p + "joint_blocks.4.x_block.attn2.qkv.bias.1", "SD3.5 attn2"},
		{p + "transformer_blocks.4.attn2.to_out.0.weight", SD3, p + "joint_blocks.4.x_block.attn2.proj.weight", "SD3.5 attn2 proj"},
		{p + "transformer_blocks.4.attn.norm_added_q.weight", SD3, p + "joint_blocks.4.context_block.attn.ln_q.weight", "context q norm"},
		{p + "transformer_blocks.4.attn2.norm_k.weight", SD3, p + "joint_blocks.4.x_block.attn2.ln_k.weight", "attn2 k norm"},
		{p + "transformer_blocks.37.ff_context.net.0.proj.bias", SD3, p + "joint_blocks.37.context_block.mlp.fc1.bias", "context mlp"},
		{p + "transformer_blocks.37.norm1_context.linear.weight", SD3, p + "joint_blocks.37.context_block.adaLN_modulation.1.weight", "context modulation"},
		{p + "transformer_blocks.2.attn.to_add_out.weight", SD3, p + "joint_blocks.2.context_block.attn.proj.weight", "context proj"},
		{p + "pos_embed.pos_embed", SD3, p + "pos_embed", "positional embedding"},
		{p + "pos_embed.proj.weight", SD3, p + "x_embedder.proj.weight", "patch embedding"},
		{p + "time_text_embed.text_embedder.linear_2.bias", SD3, p + "y_embedder.mlp.2.bias", "pooled text embedding"},
		{p + "norm_out.linear.bias", SD3, p + "final_layer.adaLN_modulation.1.bias", "final modulation"},
		{p + "joint_blocks.0.x_block.attn.qkv.weight", SD3, p + "joint_blocks.0.x_block.attn.qkv.weight", "original kept"},
		{p + "pos_embed", SD3, p + "pos_embed", "original kept"},
	}
}

func TestConvertWanVAEAndOtherDiTs(t *testing.T) { runCases(t, wanCases()) }

func wanCases() []convCase {
	f, p := "first_stage_model.", "model.diffusion_model."
	return []convCase{
		{"vae.decoder.conv_in.weight", QwenImage, f + "decoder.conv1.weight", "Wan VAE: conv_in"},
		{"vae.decoder.up_blocks.1.resnets.0.conv_shortcut.weight", Wan2, f + "decoder.upsamples.4.shortcut.weight", "Wan VAE: shortcut before its block"},
		{"vae.decoder.up_blocks.2.resnets.1.conv2.bias", Wan2, f + "decoder.upsamples.9.residual.6.bias", "Wan VAE: flat decoder list + residual conv2"},
		{"vae.decoder.up_blocks.0.upsamplers.0.resample.1.weight", Wan22TI2V, f + "decoder.upsamples.3.resample.1.weight", "Wan VAE: upsampler"},
		{"vae.decoder.up_blocks.3.resnets.2.norm2.gamma", Wan22I2V, f + "decoder.upsamples.14.residual.3.gamma", "Wan VAE: last decoder block"},
		{"vae.encoder.down_blocks.3.conv_shortcut.bias", Wan2, f + "encoder.downsamples.3.shortcut.bias", "Wan VAE: encoder shortcut"},
		{"vae.encoder.down_blocks.4.norm1.gamma", Wan2, f + "encoder.downsamples.4.residual.0.gamma", "Wan VAE: encoder residual norm1"},
		{"vae.encoder.down_blocks.5.resample.1.weight", Anima, f + "encoder.downsamples.5.resample.1.weight", "Wan VAE: downsampler"},
		{"vae.decoder.mid_block.resnets.1.conv1.weight", QwenImage, f + "decoder.middle.2.residual.2.weight", "Wan VAE: mid resnet"},
		{"vae.decoder.mid_block.attentions.0.to_qkv.weight", QwenImage, f + "decoder.middle.1.to_qkv.weight", "Wan VAE: mid attention"},
		{"vae.decoder.norm_out.gamma", Wan2, f + "decoder.head.0.gamma", "Wan VAE: norm_out"},
		{"vae.encoder.conv_out.bias", Wan2, f + "encoder.head.2.bias", "Wan VAE: conv_out"},
		{"vae.quant_conv.weight", Wan2, f + "conv1.weight", "Wan VAE: quant conv"},
		{"vae.post_quant_conv.bias", Wan2, f + "conv2.bias", "Wan VAE: post-quant conv"},
		{f + "decoder.upsamples.0.residual.0.gamma", Wan2, f + "decoder.upsamples.0.residual.0.gamma", "Wan VAE original kept"},
		{f + "decoder.middle.0.residual.2.weight", Wan2, f + "decoder.middle.0.residual.2.weight", "Wan VAE original kept"},
		{"vae.decoder.up_blocks.0.resnets.0.conv1.weight", Wan2, f + "decoder.upsamples.0.residual.2.weight", "Wan VAE, not the SD one"},
		{p + "blocks.0.self_attn.q.weight", Wan2, p + "blocks.0.self_attn.q.weight", "Wan DiT: no renames"},
		{p + "blocks.0.self_attn.q_proj.weight", Anima, p + "net.blocks.0.self_attn.q_proj.weight", "Anima: net. prefix"},
		{p + "net.blocks.0.self_attn.q_proj.weight", Anima, p + "net.blocks.0.self_attn.q_proj.weight", "Anima: net. kept"},
		{p + "layers.29.attention.to_k.bias", ZImage, p + "layers.29.attention.qkv.bias.1", "Z-Image: k part of qkv"},
		{p + "noise_refiner.1.attention.norm_q.weight", ZImage, p + "noise_refiner.1.attention.q_norm.weight", "Z-Image: q norm"},
		{p + "context_refiner.0.attention.to_out.0.weight", ZImage, p + "context_refiner.0.attention.out.weight", "Z-Image: out"},
		{p + "all_x_embedder.2-1.weight", ZImage, p + "x_embedder.weight", "Z-Image: patch embedder"},
		{p + "all_final_layer.2-1.linear.bias", ZImage, p + "final_layer.linear.bias", "Z-Image: final layer"},
		{p + "layers.30.attention.to_q.weight", ZImage, p + "layers.30.attention.to_q.weight", "Z-Image: only 30 layers listed"},
		{"vae.decoder.mid_block.attentions.0.to_q.weight", ZImage, f + "decoder.mid.attn_1.q.weight", "Z-Image uses the SD/Flux VAE rules"},
		{p + "double_blocks.3.img_attn_qkv.weight", HunyuanVideo, p + "double_blocks.3.img_attn.qkv.weight", "Hunyuan: qkv, prefix rule keeps the tail"},
		{p + "double_blocks.53.txt_attn_k_norm.weight", HunyuanVideo, p + "double_blocks.53.txt_attn.norm.key_norm.scale", "Hunyuan: k norm"},
		{p + "double_blocks.0.img_mod.linear.bias", HunyuanVideo, p + "double_blocks.0.img_mod.lin.bias", "Hunyuan: modulation"},
		{p + "double_blocks.0.txt_mlp.fc2.weight", HunyuanVideo, p + "double_blocks.0.txt_mlp.2.weight", "Hunyuan: mlp"},
		{p + "time_in.mlp.2.bias", HunyuanVideo, p + "time_in.out_layer.bias", "Hunyuan: time embedding"},
		{p + "txt_in.c_embedder.linear_1.weight", HunyuanVideo, p + "txt_in.c_embedder.in_layer.weight", "Hunyuan: caption embedder"},
		{p + "txt_in.individual_token_refiner.blocks.0.mlp.fc1.weight", HunyuanVideo, p + "txt_in.individual_token_refiner.blocks.0.mlp.0.weight", "Hunyuan: generic mlp rename"},
		{p + "single_blocks.5.modulation.linear.weight", HunyuanVideo, p + "single_blocks.5.modulation.lin.weight", "Hunyuan: generic modulation rename"},
		{p + "img_in.weight", Krea2, p + "first.weight", "Krea 2: prefix"},
		{p + "transformer_blocks.7.attn.to_out.0.weight", Krea2, p + "blocks.7.attn.wo.weight", "Krea 2: block prefix + to_out.0"},
		{p + "transformer_blocks.7.attn.to_gate.bias", Krea2, p + "blocks.7.attn.gate.bias", "Krea 2: gate"},
		{p + "transformer_blocks.7.ff.down.weight", Krea2, p + "blocks.7.mlp.down.weight", "Krea 2: mlp"},
		{p + "txt_in.linear_2.weight", Krea2, p + "txtmlp.3.weight", "Krea 2: text mlp"},
		{p + "txt_in.norm.weight", Krea2, p + "txtmlp.0.weight", "Krea 2: text norm (name rule)"},
		{p + "final_layer.norm.weight", Krea2, p + "last.norm.scale", "Krea 2: final norm, prefix then name rule"},
		{p + "final_layer.modulation.weight", Krea2, p + "last.modulation.lin", "Krea 2: final modulation"},
		{p + "text_fusion.projector.weight", Krea2, p + "txtfusion.projector.weight", "Krea 2: text fusion"},
		{p + "blocks.7.attn.wq.weight", Krea2, p + "blocks.7.attn.wq.weight", "Krea 2 original kept"},
		{"vae.decoder.up_blocks.0.upsamplers.0.resample.1.weight", Krea2, f + "decoder.upsamples.3.resample.1.weight", "Krea 2 uses the Wan VAE"},
		{"text_encoders.llm.model.visual.blocks.0.attn.qkv.weight", Krea2, "text_encoders.llm.visual.blocks.0.attn.qkv.weight", "Krea 2: HF vision tower moved"},
		{"text_encoders.llm.visual.v.blk.3.attn_qkv.weight", Krea2, "text_encoders.llm.visual.blocks.3.attn.qkv.weight", "Krea 2: GGUF vision block"},
		{"text_encoders.llm.visual.mm.0.weight", Krea2, "text_encoders.llm.visual.merger.linear_fc1.weight", "Krea 2: GGUF merger (not the Qwen2.5-VL one)"},
		{"text_encoders.llm.visual.v.deepstack.8.fc2.bias", Krea2, "text_encoders.llm.visual.deepstack_merger_list.0.linear_fc2.bias", "Krea 2: deepstack"},
		{"text_encoders.llm.visual.v.patch_embd.weight.1", Krea2, "text_encoders.llm.visual.patch_embed.proj.1.weight", "Krea 2: second patch kernel before the first"},
		{"vae.decoder.up_blocks.0.resnets.0.conv1.weight", HunyuanVideo, f + "decoder.up_blocks.0.resnets.0.conv1.weight", "Hunyuan: VAE names kept"},
	}
}

func TestConvertLoRA(t *testing.T) {
	p := "lora.model.diffusion_model."
	runCases(t, []convCase{
		{"lora.lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight", SD1, p + "input_blocks.1.1.proj_in.weight.lora_down", "kohya: separators, suffix, diffusers UNet"},
		{"lora.lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q.lora_up.weight", SD1, p + "input_blocks.4.1.transformer_blocks.0.attn1.to_q.weight.lora_up", "kohya with LDM names"},
		{"lora.lora_te_text_model_encoder_layers_0_self_attn_q_proj.alpha", SD1, "lora.cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight.alpha", "kohya text encoder, alpha"},
		{"lora.unet.down_blocks.1.attentions.0.proj_in.lora.down.weight", SD1, p + "input_blocks.4.1.proj_in.weight.lora_down", "diffusers dotted suffix"},
		{"lora.unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor.to_q_lora.down.weight", SD1, p + "input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight.lora_down", ".processor removed"},
		{"lora.lycoris_down_blocks_0_resnets_0_conv1.hada_w1_a", SD1, p + "input_blocks.1.0.in_layers.2.weight.hada_w1_a", "LyCORIS, bare diffusers UNet head"},
		{"lora.transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight", Flux, p + "single_blocks.0.linear1.weight.lora_down", "peft lora_A on Flux, prefix rule keeps the tail"},
		{"lora.transformer_blocks.0.attn.to_k.lora_B.weight", Flux, p + "double_blocks.0.img_attn.qkv.weight.1.lora_up", "bare DiT head gets transformer."},
		{"lora.diffusion_model.double_blocks.0.img_attn.proj.diff_b", Flux, p + "double_blocks.0.img_attn.proj.bias.diff", "diff_b suffix"},
		{"lora.model.diffusion_model.single_blocks.1.linear1.lora_A", Flux, p + "single_blocks.1.linear1.weight.lora_down", "bare lora_A"},
	})
}

func TestConvertOther(t *testing.T) { runCases(t, otherCases()) }

func otherCases() []convCase {
	return []convCase{
		{"ip_adapter.1.to_k_ip.weight", SD1, "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k_ip.weight", "IP-Adapter SD1 index 1"},
		{"ip_adapter.31.to_v_ip.weight", SD1, "model.diffusion_model.middle_block.1.transformer_blocks.0.attn2.to_v_ip.weight", "IP-Adapter SD1 index 31"},
		{"ip_adapter.2.to_k_ip.weight", SD1, "ip_adapter.2.to_k_ip.weight", "IP-Adapter: even index has no block"},
		{"ip_adapter.1.to_k_ip", SD1, "ip_adapter.1.to_k_ip", "IP-Adapter: too few segments"},
		{"ip_adapter.3.to_k_ip.weight", SDXL, "model.diffusion_model.input_blocks.4.1.transformer_blocks.1.attn2.to_k_ip.weight", "IP-Adapter SDXL index 3"},
		{"ip_adapter.139.to_v_ip.weight", SDXL, "model.diffusion_model.middle_block.1.transformer_blocks.9.attn2.to_v_ip.weight", "IP-Adapter SDXL last index"},
		{"image_proj.proj.weight", SD1, "ip_adapter.image_proj.proj.weight", "IP-Adapter image projection"},
		{"controlnet_cond_embedding.conv_in.weight", SDXL, "input_hint_block.0.weight", "SDXL ControlNet hint"},
		{"controlnet_cond_embedding.blocks.5.bias", SDXL, "input_hint_block.12.bias", "SDXL ControlNet hint block"},
		{"controlnet_down_blocks.3.weight", SDXL, "zero_convs.3.0.weight", "SDXL ControlNet zero conv"},
		{"controlnet_mid_block.bias", SDXL, "middle_block_out.0.bias", "SDXL ControlNet mid"},
		{"down_blocks.1.attentions.0.proj_in.weight", SDXL, "input_blocks.4.1.proj_in.weight", "bare SDXL diffusers block"},
		{"down_blocks.1.attentions.0.proj_in.weight", SD1, "down_blocks.1.attentions.0.proj_in.weight", "bare names only for SDXL"},
		{"control_model.input_blocks.0.0.weight", SD1, "input_blocks.0.0.weight", "control_model. stripped"},
		{"pmid.vision_model.visual_projection.weight", SDXL, "pmid.visual_projection.weight", "PhotoMaker projection"},
		{"pmid.qformer_perceiver.perceiver_resampler.layers.2.1.3.weight", SDXL, "pmid.qformer_perceiver.perceiver_resampler.layers.2.1.1.fc2.weight", "PhotoMaker v2 perceiver"},
		{"pmid.qformer_perceiver.token_proj.0.bias", SDXL, "pmid.qformer_perceiver.token_proj.fc1.bias", "PhotoMaker v2 token projection"},
		{"model.diffusion_model.input_blocks.1.1.proj_in.scale_weight", SD1, "model.diffusion_model.input_blocks.1.1.proj_in.weight_scale", "scale_weight -> weight_scale"},
	}
}

func TestConvertAllCollision(t *testing.T) {
	// The diffusers and LDM names of the same tensor collide once converted.
	in := []string{"unet.conv_in.weight", "model.diffusion_model.time_embed.0.weight", "model.diffusion_model.input_blocks.0.0.weight"}
	_, err := ConvertAll(in, SD1)
	var ce *CollisionError
	if !errors.As(err, &ce) {
		t.Fatalf("ConvertAll: err = %v, want a *CollisionError", err)
	}
	if ce.First != in[0] || ce.Second != in[2] || ce.Converted != "model.diffusion_model.input_blocks.0.0.weight" {
		t.Errorf("collision = %+v", ce)
	}
	for _, s := range []string{in[0], in[2]} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}

	_, err = ConvertAll([]string{"a", "b", "a"}, SD1)
	if !errors.As(err, &ce) || ce.First != "a" || ce.Second != "a" {
		t.Errorf("repeated name: err = %v", err)
	}

	out, err := ConvertAll([]string{"vae.decoder.conv_in.weight", "te.text_model.final_layer_norm.weight", "unet.conv_out.bias"}, SD1)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"first_stage_model.decoder.conv_in.weight", "cond_stage_model.transformer.text_model.final_layer_norm.weight", "model.diffusion_model.out.2.bias"}
	for i := range want {
		if out[i] != want[i] {
			t.Errorf("ConvertAll[%d] = %q, want %q (order must be kept)", i, out[i], want[i])
		}
	}
}

func TestTablesWellFormed(t *testing.T) {
	for name, r := range substLists {
		if err := r.validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := newPrefixTable(map[string]string{"a.": "x", "a.b": "y"}); err == nil {
		t.Error("newPrefixTable accepted overlapping keys")
	}
	if got := len(sd1UNet.blocks.rules); got != 47 {
		t.Errorf("SD1 block rules: %d, want 47 (4 levels as in sd.cpp)", got)
	}
}

func TestVersionString(t *testing.T) {
	for v := Unknown; v < numVersions; v++ {
		s := v.String()
		if s == "" {
			t.Errorf("version %d has no name", int(v))
		}
		back, err := ParseVersion(s)
		if err != nil || back != v {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", s, back, err, v)
		}
	}
	if _, err := ParseVersion("sd9"); err == nil {
		t.Error("ParseVersion accepted sd9")
	}
	if s := Version(99).String(); s != "version(99)" {
		t.Errorf("Version(99).String() = %q", s)
	}
}

// Names longer than the editor's stack buffer, and renames that grow a name
// past it, give the same result as the plain path.
func TestConvertLongNames(t *testing.T) {
	for n := 180; n <= 300; n++ {
		pad := strings.Repeat("a", n)
		in := "unet.down_blocks.0.resnets.0." + pad + ".norm1.weight"
		want := "model.diffusion_model.input_blocks.1.0." + pad + ".in_layers.0.weight"
		if got := Convert(in, SD1); got != want {
			t.Fatalf("pad %d: Convert = %q, want %q", n, got, want)
		}
		if got := convert(in, SD1, false); got != want {
			t.Fatalf("pad %d: unguarded = %q", n, got)
		}
		vin := "vae.decoder.mid_block.attentions.0." + pad + ".to_q.weight"
		if got, slow := Convert(vin, SD1), convert(vin, SD1, false); got != slow || !strings.HasPrefix(got, "first_stage_model.decoder.mid.attn_1.") {
			t.Fatalf("pad %d: VAE %q, unguarded %q", n, got, slow)
		}
	}
}

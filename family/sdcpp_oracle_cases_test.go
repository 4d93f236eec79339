package family

import (
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// tensorsOf builds descriptors from names; shapes (PyTorch order) are given
// for the few tensors get_sd_version measures, the rest are 1-D.
func tensorsOf(names []string, shapes map[string][]int64) []formats.Tensor {
	ts := make([]formats.Tensor, len(names))
	for i, n := range names {
		s, ok := shapes[n]
		if !ok {
			s = []int64{4}
		}
		ts[i] = formats.Tensor{Name: n, Type: formats.F16, Shape: s}
	}
	return ts
}

const (
	sd1Token  = "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight"
	sd2Token  = "cond_stage_model.model.token_embedding.weight"
	ldmConvIn = "model.diffusion_model.input_blocks.0.0.weight"
)

func ldmUNetNames(withMiddle, with311, with71 bool) []string {
	n := []string{
		ldmConvIn,
		"model.diffusion_model.input_blocks.1.0.in_layers.0.weight",
		"model.diffusion_model.output_blocks.3.1.transformer_blocks.0.attn1.to_q.weight",
	}
	if withMiddle {
		n = append(n, "model.diffusion_model.middle_block.1.proj_in.weight")
	}
	if with311 {
		n = append(n, "model.diffusion_model.output_blocks.3.1.transformer_blocks.1.attn1.to_q.weight")
	}
	if with71 {
		n = append(n, "model.diffusion_model.output_blocks.7.1.transformer_blocks.0.attn1.to_k.weight")
	}
	return n
}

// TestSDCppOracle checks the oracle itself on the marker tensors of each
// version, with the expectations read off get_sd_version by hand.
func TestSDCppOracle(t *testing.T) {
	conv := func(in int64) map[string][]int64 {
		return map[string][]int64{ldmConvIn: {320, in, 3, 3}, sd1Token: {49408, 768}, sd2Token: {49408, 1024}}
	}
	with := func(a []string, b ...string) []string { return append(append([]string(nil), a...), b...) }
	sdxlLDM := with(ldmUNetNames(true, true, true), "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight")
	flux := []string{"model.diffusion_model.double_blocks.0.img_attn.qkv.weight", "model.diffusion_model.img_in.weight", "model.diffusion_model.txt_in.weight"}
	fluxShapes := func(imgIn, txtIn int64) map[string][]int64 {
		return map[string][]int64{"model.diffusion_model.img_in.weight": {3072, imgIn}, "model.diffusion_model.txt_in.weight": {3072, txtIn}}
	}

	wan := []string{"model.diffusion_model.blocks.0.cross_attn.norm_k.weight", "model.diffusion_model.patch_embedding.weight"}
	wanShapes := func(out, in int64) map[string][]int64 {
		return map[string][]int64{"model.diffusion_model.patch_embedding.weight": {out, in, 1, 2, 2}}
	}
	qwen := []string{"model.diffusion_model.img_in.weight", "model.diffusion_model.transformer_blocks.0.img_mod.1.weight"}

	cases := []struct {
		what   string
		names  []string
		shapes map[string][]int64
		want   string
	}{
		{"empty", nil, nil, ""},
		{"VAE only", []string{"first_stage_model.decoder.conv_in.weight"}, nil, ""},
		{"SD1 LDM", with(ldmUNetNames(true, true, true), sd1Token), conv(4), "sd1"},
		{"SD1 inpaint (9 input channels)", with(ldmUNetNames(true, true, true), sd1Token), conv(9), "sd1-inpaint"},
		{"SD1 pix2pix (8 input channels)", with(ldmUNetNames(true, true, true), sd1Token), conv(8), "sd1-pix2pix"},
		{"SD1 tiny UNet (no middle block)", with(ldmUNetNames(false, true, true), sd1Token), conv(4), "sd1-tiny-unet"},
		{"SDXS-512 (no middle block, no output 7.1)", with(ldmUNetNames(false, true, false), sd1Token), conv(4), "sdxs-512-ds"},
		{"SD2 LDM", with(ldmUNetNames(true, true, true), sd2Token), conv(4), "sd2"},
		{"SD2 inpaint", with(ldmUNetNames(true, true, true), sd2Token), conv(9), "sd2-inpaint"},
		{"SD2 tiny UNet", with(ldmUNetNames(false, true, true), sd2Token), conv(4), "sd2-tiny-unet"},
		{"SDXS-09 (attn1.to_k reads 1024)", with(ldmUNetNames(false, true, true), sd2Token),
			map[string][]int64{ldmConvIn: {320, 4, 3, 3}, sd2Token: {49408, 1024}, "model.diffusion_model.output_blocks.7.1.transformer_blocks.0.attn1.to_k.weight": {640, 1024}}, "sdxs-09"},
		{"SDXL LDM", sdxlLDM, conv(4), "sdxl"},
		{"SDXL, second encoder listed first", with([]string{"conditioner.embedders.1.model.ln_final.weight"}, ldmUNetNames(true, true, true)...), conv(4), "sdxl"},
		{"SDXL inpaint", sdxlLDM, conv(9), "sdxl-inpaint"},
		{"SDXL pix2pix", sdxlLDM, conv(8), "sdxl-pix2pix"},
		{"SSD-1B (no middle block)", with(ldmUNetNames(false, true, true), "cond_stage_model.1.transformer.x"), conv(4), "sdxl-ssd1b"},
		{"Vega (no middle block, no 3.1 depth 2)", with(ldmUNetNames(false, false, true), "cond_stage_model.1.transformer.x"), conv(4), "sdxl-vega"},
		{"SD1 diffusers", []string{"unet.conv_in.weight", "unet.down_blocks.0.resnets.0.conv1.weight", "unet.mid_block.resnets.1.conv1.weight", "unet.up_blocks.2.attentions.1.proj_in.weight", "te.text_model.embeddings.token_embedding.weight"},
			map[string][]int64{"unet.conv_in.weight": {320, 4, 3, 3}, "te.text_model.embeddings.token_embedding.weight": {49408, 768}}, "sd1"},
		{"SDXL diffusers (te.1)", []string{"unet.conv_in.weight", "unet.down_blocks.0.resnets.0.conv1.weight", "unet.mid_block.resnets.1.conv1.weight", "te.1.text_model.final_layer_norm.weight"},
			map[string][]int64{"unet.conv_in.weight": {320, 4, 3, 3}}, "sdxl"},
		{"SVD", with(ldmUNetNames(true, true, true), "model.diffusion_model.input_blocks.8.0.time_mixer.mix_factor", sd1Token), conv(4), "svd"},
		{"SD3", []string{"model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight", sd1Token}, conv(4), "sd3"},
		{"Flux", flux, fluxShapes(64, 4096), "flux"},
		{"Flux diffusers", []string{"model.diffusion_model.single_transformer_blocks.0.attn.to_q.weight"}, nil, "flux"},
		{"Flux Fill (384 input features)", flux, fluxShapes(384, 4096), "flux-fill"},
		{"Flux Controls (128)", flux, fluxShapes(128, 4096), "flux-controls"},
		{"Flex.2 (196)", flux, fluxShapes(196, 4096), "flex-2"},
		{"LongCat (3584 text features)", flux, fluxShapes(64, 3584), "longcat"},
		{"Chroma Radiance", with(flux, "model.diffusion_model.nerf_final_layer_conv.conv.weight"), fluxShapes(64, 4096), "chroma-radiance"},
		{"Ovis-Image", with(flux, "model.diffusion_model.double_blocks.0.img_mlp.gate_proj.weight"), fluxShapes(64, 4096), "ovis-image"},
		{"Flux.2 Klein", with(flux, "model.diffusion_model.double_stream_modulation_img.lin.weight"), fluxShapes(128, 7680), "flux2-klein"},
		{"Flux.2", with(flux, "model.diffusion_model.double_stream_modulation_img.lin.weight", "model.diffusion_model.single_blocks.47.linear1.weight"), fluxShapes(128, 15360), "flux2"},
		// Wan: the 5-D patch embedding folds to ne[3] = out*in channels.
		{"Wan 2.1 T2V", wan, wanShapes(5120, 16), "wan2"},
		{"Wan 2.2 I2V (5120*36)", wan, wanShapes(5120, 36), "wan2.2-i2v"},
		{"Wan 2.1 I2V (same channels, image embedding)", with(wan, "model.diffusion_model.img_emb.proj.0.weight"), wanShapes(5120, 36), "wan2"},
		{"Wan 2.2 TI2V (3072*48)", wan, wanShapes(3072, 48), "wan2.2-ti2v"},
		{"Wan 2.2 S2V", with(wan, "casual_audio_encoder.weights"), wanShapes(5120, 36), "wan2.2-s2v"},
		{"Qwen-Image", qwen, map[string][]int64{"model.diffusion_model.img_in.weight": {3072, 64}}, "qwen-image"},
		{"MAGE-Flow (Qwen marker, 128 input features)", qwen, map[string][]int64{"model.diffusion_model.img_in.weight": {3072, 128}}, "mage-flow"},
		{"Qwen-Image-Layered", with(qwen, "model.diffusion_model.time_text_embed.addition_t_embedding.weight"), nil, "qwen-image-layered"},
		{"Z-Image", []string{"model.diffusion_model.cap_embedder.0.weight"}, nil, "z-image"},
		{"Krea 2 (diffusers)", []string{"model.diffusion_model.text_fusion.projector.weight"}, nil, "krea2"},
		{"Krea 2 (original)", []string{"model.diffusion_model.txtfusion.projector.weight"}, nil, "krea2"},
		{"Hunyuan Video", []string{"model.diffusion_model.double_blocks.0.img_attn_qkv.weight", "model.diffusion_model.txt_in.individual_token_refiner.blocks.0.adaLN_modulation.1.weight"}, nil, "hunyuan-video"},
		{"Anima", []string{"model.diffusion_model.llm_adapter.blocks.0.cross_attn.q_proj.weight"}, nil, "anima"},
		{"HiDream-O1 needs both tensors", []string{"model.x_embedder.proj1.weight"}, nil, ""},
		{"HiDream-O1", []string{"model.x_embedder.proj1.weight", "model.language_model.layers.0.self_attn.q_proj.weight"}, nil, "hidream-o1"},
		// The early return of the first marker met wins, as in sd.cpp's scan.
		{"SD3 marker before UNet tensors", with([]string{"model.diffusion_model.joint_blocks.0.x"}, with(ldmUNetNames(true, true, true), sd1Token)...), conv(4), "sd3"},
	}
	for _, c := range cases {
		if got := sdcppOracle(tensorsOf(c.names, c.shapes)); got != c.want {
			t.Errorf("%s: oracle = %q, want %q", c.what, got, c.want)
		}
	}
}

func TestNE(t *testing.T) {
	tt := &formats.Tensor{Shape: []int64{320, 9, 3, 3}}
	for i, want := range []int64{3, 3, 9, 320, 1} {
		if got := ne(tt, i); got != want {
			t.Errorf("ne(%d) = %d, want %d", i, got, want)
		}
	}
	five := &formats.Tensor{Shape: []int64{5120, 36, 1, 2, 2}}
	for i, want := range []int64{2, 2, 1, 5120 * 36} {
		if got := ne(five, i); got != want {
			t.Errorf("5-D ne(%d) = %d, want %d", i, got, want)
		}
	}
	if ne(nil, 0) != 1 {
		t.Error("ne of a missing tensor is not 1")
	}
}

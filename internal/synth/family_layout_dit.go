package synth

// DiT layouts other than Flux: names as the released single files (or
// ComfyUI's repackaged ones) have them, widths divided.

// layoutSD3 are MMDiT's tensors; attn2 adds SD 3.5 medium's second x-block attention.
func layoutSD3(attn2 bool) []string {
	l := joinLines(
		[]string{"x_embedder.proj.weight R 16 2 2", "x_embedder.proj.bias R", "pos_embed 1 64 H"},
		layoutLinear("t_embedder.mlp.0", "H", "256"), layoutLinear("t_embedder.mlp.2", "H", "H"),
		layoutLinear("y_embedder.mlp.0", "H", "2048"), layoutLinear("y_embedder.mlp.2", "H", "H"),
		layoutLinear("context_embedder", "H", "T"),
	)
	for _, s := range []string{"context_block", "x_block"} {
		p := "joint_blocks.{i}." + s
		l = append(l, joinLines(layoutLinear(p+".adaLN_modulation.1", "6H", "H"), layoutLinear(p+".attn.qkv", "3H", "H"),
			layoutLinear(p+".attn.proj", "H", "H"), layoutLinear(p+".mlp.fc1", "4H", "H"), layoutLinear(p+".mlp.fc2", "H", "4H"))...)
	}
	if attn2 {
		l = append(l, joinLines(layoutLinear("joint_blocks.{i}.x_block.attn2.qkv", "3H", "H"), layoutLinear("joint_blocks.{i}.x_block.attn2.proj", "H", "H"))...)
	}
	return append(l, joinLines(layoutLinear("final_layer.adaLN_modulation.1", "2H", "H"), layoutLinear("final_layer.linear", "64", "H"))...)
}

// layoutWan are Wan 2.x's tensors with c input channels (16 t2v, 36 i2v,
// 48 TI2V 5B); imgEmb adds Wan 2.1 I2V's CLIP image projection.
func layoutWan(imgEmb bool) []string {
	l := joinLines(
		[]string{"patch_embedding.weight H C 1 2 2", "patch_embedding.bias H"},
		layoutLinear("text_embedding.0", "H", "T"), layoutLinear("text_embedding.2", "H", "H"),
		layoutLinear("time_embedding.0", "H", "256"), layoutLinear("time_embedding.2", "H", "H"),
		layoutLinear("time_projection.1", "6H", "H"),
		[]string{"blocks.{i}.modulation 1 6 H"},
	)
	for _, a := range []string{"self_attn", "cross_attn"} {
		for _, n := range []string{"q", "k", "v", "o"} {
			l = append(l, layoutLinear("blocks.{i}."+a+"."+n, "H", "H")...)
		}
		l = append(l, "blocks.{i}."+a+".norm_q.weight H", "blocks.{i}."+a+".norm_k.weight H")
	}
	if imgEmb {
		l = append(l, joinLines(layoutLinear("blocks.{i}.cross_attn.k_img", "H", "H"), layoutLinear("blocks.{i}.cross_attn.v_img", "H", "H"),
			[]string{"blocks.{i}.cross_attn.norm_k_img.weight H"},
			[]string{"img_emb.proj.0.weight 1280", "img_emb.proj.0.bias 1280"},
			layoutLinear("img_emb.proj.1", "1280", "1280"), layoutLinear("img_emb.proj.3", "H", "1280"),
			[]string{"img_emb.proj.4.weight H", "img_emb.proj.4.bias H"})...)
	}
	return append(l, joinLines(
		[]string{"blocks.{i}.norm3.weight H", "blocks.{i}.norm3.bias H"},
		layoutLinear("blocks.{i}.ffn.0", "F", "H"), layoutLinear("blocks.{i}.ffn.2", "H", "F"),
		[]string{"head.modulation 1 2 H"}, layoutLinear("head.head", "4O", "H"),
	)...)
}

func layoutWanDims(c, o int) map[string]int {
	return map[string]int{"H": 64, "F": 256, "T": 128, "C": c, "O": o}
}

// init registers the DiT layouts. It is long because it is a table, one
// addLayout per layout, not logic.
func init() {
	// x_embedder keeps the real width R: detection reads it.
	sd3 := func(h, r int) map[string]int { return map[string]int{"H": h, "R": r, "T": 128} }
	addLayout("layout-sd3-medium", layout{doc: "SD 3 medium (1536 wide, here 512)", dims: sd3(512, 1536), blocks: 2, lines: layoutSD3(false)})
	addLayout("layout-sd3.5-medium", layout{doc: "SD 3.5 medium (MMDiT-X: x_block.attn2)", dims: sd3(512, 1536), blocks: 2, lines: layoutSD3(true)})
	// 2432 = 9.5 x 256: a quarter of it keeps the property that rows are
	// whole 32-element blocks but not whole 256-element k-quant blocks.
	addLayout("layout-sd3.5-large", layout{doc: "SD 3.5 large (2432 wide, here 608: k-quants take the legacy fallbacks)", dims: sd3(608, 2432), blocks: 1, lines: layoutSD3(false)})

	addLayout("layout-wan-t2v", layout{doc: "Wan 2.1/2.2 T2V (14B names, 16 latent channels)", dims: layoutWanDims(16, 16), blocks: 2, lines: layoutWan(false)})
	addLayout("layout-wan-i2v", layout{doc: "Wan 2.1 I2V (36 input channels, CLIP image embedding)", dims: layoutWanDims(36, 16), blocks: 2, lines: layoutWan(true)})
	addLayout("layout-wan2.2-i2v", layout{doc: "Wan 2.2 I2V A14B (36 input channels, no img_emb)", dims: layoutWanDims(36, 16), blocks: 2, lines: layoutWan(false)})
	addLayout("layout-wan2.2-ti2v-5b", layout{doc: "Wan 2.2 TI2V 5B (48 latent channels)", dims: layoutWanDims(48, 48), blocks: 2, lines: layoutWan(false)})

	// HunyuanVideo 1.5's original names, every key that diffusers'
	// conversion script (scripts/convert_hunyuan_video1_5_to_diffusers.py)
	// takes from the released checkpoint: separate q/k/v per stream with
	// their own norms, img_mod.linear, fc1/fc2 MLPs, a token refiner with
	// fused self_attn_qkv, the ByT5 glyph and SigLIP image inputs, and a
	// condition-type embedding; in_channels 65, out 32, patch 1.
	hyStream := func(p string) []string {
		l := layoutLinear(p+"_mod.linear", "6H", "H")
		for _, n := range []string{"q", "k", "v"} {
			l = append(l, layoutLinear(p+"_attn_"+n, "H", "H")...)
		}
		return joinLines(l, []string{p + "_attn_q_norm.weight D", p + "_attn_k_norm.weight D"},
			layoutLinear(p+"_attn_proj", "H", "H"), layoutLinear(p+"_mlp.fc1", "4H", "H"), layoutLinear(p+"_mlp.fc2", "H", "4H"))
	}
	refiner := "txt_in.individual_token_refiner.blocks.{j}."
	hunyuan := joinLines(
		[]string{"img_in.proj.weight H 65 1 1 1", "img_in.proj.bias H", "cond_type_embedding.weight 3 H"},
		layoutLinear("time_in.mlp.0", "H", "256"), layoutLinear("time_in.mlp.2", "H", "H"),
		layoutLinear("txt_in.input_embedder", "H", "T"),
		layoutLinear("txt_in.t_embedder.mlp.0", "H", "256"), layoutLinear("txt_in.t_embedder.mlp.2", "H", "H"),
		layoutLinear("txt_in.c_embedder.linear_1", "H", "T"), layoutLinear("txt_in.c_embedder.linear_2", "H", "H"),
		[]string{refiner + "norm1.weight H", refiner + "norm1.bias H", refiner + "norm2.weight H", refiner + "norm2.bias H"},
		layoutLinear(refiner+"self_attn_qkv", "3H", "H"), layoutLinear(refiner+"self_attn_proj", "H", "H"),
		layoutLinear(refiner+"mlp.fc1", "4H", "H"), layoutLinear(refiner+"mlp.fc2", "H", "4H"),
		layoutLinear(refiner+"adaLN_modulation.1", "2H", "H"),
		[]string{"byt5_in.layernorm.weight B", "byt5_in.layernorm.bias B"},
		layoutLinear("byt5_in.fc1", "H", "B"), layoutLinear("byt5_in.fc2", "H", "H"), layoutLinear("byt5_in.fc3", "H", "H"),
		[]string{"vision_in.proj.0.weight I", "vision_in.proj.0.bias I"}, layoutLinear("vision_in.proj.1", "H", "I"),
		layoutLinear("vision_in.proj.3", "H", "H"), []string{"vision_in.proj.4.weight H", "vision_in.proj.4.bias H"},
		hyStream("double_blocks.{i}.img"), hyStream("double_blocks.{i}.txt"),
		layoutLinear("final_layer.adaLN_modulation.1", "2H", "H"), layoutLinear("final_layer.linear", "32", "H"),
	)
	addLayout("layout-hunyuan-video-1.5", layout{doc: "HunyuanVideo 1.5 (token refiner, ByT5 glyph and SigLIP image inputs, separate q/k/v double blocks)",
		dims: map[string]int{"H": 64, "D": 16, "T": 128, "B": 1472, "I": 1152}, blocks: 2, blocks2: 2, lines: hunyuan})

	ltxBlock := joinLines(
		[]string{"transformer_blocks.{i}.scale_shift_table 6 H"},
		layoutLinear("transformer_blocks.{i}.attn1.to_q", "H", "H"), layoutLinear("transformer_blocks.{i}.attn1.to_k", "H", "H"),
		layoutLinear("transformer_blocks.{i}.attn1.to_v", "H", "H"), layoutLinear("transformer_blocks.{i}.attn1.to_out.0", "H", "H"),
		[]string{"transformer_blocks.{i}.attn1.q_norm.weight H", "transformer_blocks.{i}.attn1.k_norm.weight H"},
		layoutLinear("transformer_blocks.{i}.attn2.to_q", "H", "H"), layoutLinear("transformer_blocks.{i}.attn2.to_k", "H", "H"),
		layoutLinear("transformer_blocks.{i}.attn2.to_v", "H", "H"), layoutLinear("transformer_blocks.{i}.attn2.to_out.0", "H", "H"),
		layoutLinear("transformer_blocks.{i}.ff.net.0.proj", "4H", "H"), layoutLinear("transformer_blocks.{i}.ff.net.2", "H", "4H"),
	)
	ltxHead := joinLines(
		layoutLinear("patchify_proj", "H", "128"),
		layoutLinear("adaln_single.emb.timestep_embedder.linear_1", "H", "256"), layoutLinear("adaln_single.emb.timestep_embedder.linear_2", "H", "H"),
		layoutLinear("adaln_single.linear", "6H", "H"),
		layoutLinear("caption_projection.linear_1", "H", "T"), layoutLinear("caption_projection.linear_2", "H", "H"),
		[]string{"scale_shift_table 2 H"}, layoutLinear("proj_out", "128", "H"),
	)
	addLayout("layout-ltxv", layout{doc: "LTX-Video 0.9 (adaln_single, per-block scale_shift_table)", dims: map[string]int{"H": 64, "T": 128}, blocks: 2, lines: joinLines(ltxHead, ltxBlock)})
	// LTX-2's names agree with the keys diffusers' conversion script
	// renames (LTX_2_0_TRANSFORMER_KEYS_RENAME_DICT): the audio stream's
	// twins, the audio-video cross-attention AdaLNs and per-block tables.
	ltx2 := joinLines(ltxHead, ltxBlock,
		layoutLinear("audio_patchify_proj", "A", "128"),
		layoutLinear("audio_adaln_single.emb.timestep_embedder.linear_1", "A", "256"), layoutLinear("audio_adaln_single.linear", "6A", "A"),
		layoutLinear("audio_caption_projection.linear_1", "A", "T"),
		[]string{"audio_scale_shift_table 2 A"}, layoutLinear("audio_proj_out", "128", "A"),
		layoutLinear("transformer_blocks.{i}.audio_attn1.to_q", "A", "A"), layoutLinear("transformer_blocks.{i}.audio_attn1.to_v", "A", "A"),
		layoutLinear("transformer_blocks.{i}.audio_to_video_attn.to_q", "H", "H"),
		layoutLinear("av_ca_video_scale_shift_adaln_single.linear", "4H", "H"), layoutLinear("av_ca_a2v_gate_adaln_single.linear", "H", "H"),
		[]string{"transformer_blocks.{i}.scale_shift_table_a2v_ca_video 5 H", "transformer_blocks.{i}.scale_shift_table_a2v_ca_audio 5 A"},
	)
	addLayout("layout-ltx2", layout{doc: "LTX-2 (audio and video streams)", dims: map[string]int{"H": 64, "A": 32, "T": 128}, blocks: 2, lines: ltx2})

	qwen := joinLines(
		layoutLinear("img_in", "H", "64"), []string{"txt_norm.weight T"}, layoutLinear("txt_in", "H", "T"),
		layoutLinear("time_text_embed.timestep_embedder.linear_1", "H", "256"), layoutLinear("time_text_embed.timestep_embedder.linear_2", "H", "H"),
		layoutLinear("transformer_blocks.{i}.img_mod.1", "6H", "H"), layoutLinear("transformer_blocks.{i}.txt_mod.1", "6H", "H"),
		layoutLinear("transformer_blocks.{i}.attn.to_q", "H", "H"), layoutLinear("transformer_blocks.{i}.attn.to_k", "H", "H"),
		layoutLinear("transformer_blocks.{i}.attn.to_v", "H", "H"), layoutLinear("transformer_blocks.{i}.attn.to_out.0", "H", "H"),
		layoutLinear("transformer_blocks.{i}.attn.add_q_proj", "H", "H"), layoutLinear("transformer_blocks.{i}.attn.add_v_proj", "H", "H"),
		[]string{"transformer_blocks.{i}.attn.norm_q.weight D", "transformer_blocks.{i}.attn.norm_added_q.weight D"},
		layoutLinear("transformer_blocks.{i}.img_mlp.net.0.proj", "4H", "H"), layoutLinear("transformer_blocks.{i}.img_mlp.net.2", "H", "4H"),
		layoutLinear("transformer_blocks.{i}.txt_mlp.net.0.proj", "4H", "H"), layoutLinear("transformer_blocks.{i}.txt_mlp.net.2", "H", "4H"),
		layoutLinear("norm_out.linear", "2H", "H"), layoutLinear("proj_out", "64", "H"),
	)
	addLayout("layout-qwen-image", layout{doc: "Qwen-Image (and Edit, which has the same tensors)", dims: map[string]int{"H": 256, "D": 16, "T": 128}, blocks: 3, lines: qwen})

	zimg := func(p string) []string {
		return joinLines(layoutLinear(p+".attention.qkv", "3H", "H"), layoutLinear(p+".attention.out", "H", "H"),
			[]string{p + ".attention.q_norm.weight D", p + ".attention_norm1.weight H"},
			layoutLinear(p+".feed_forward.w1", "F", "H"), layoutLinear(p+".feed_forward.w2", "H", "F"), layoutLinear(p+".feed_forward.w3", "F", "H"))
	}
	zimage := joinLines(
		layoutLinear("x_embedder", "H", "64"), []string{"x_pad_token 1 H", "cap_pad_token 1 H"},
		layoutLinear("t_embedder.mlp.0", "256", "256"), layoutLinear("t_embedder.mlp.2", "256", "256"),
		[]string{"cap_embedder.0.weight T"}, layoutLinear("cap_embedder.1", "H", "T"),
		zimg("noise_refiner.{j}"), layoutLinear("noise_refiner.{j}.adaLN_modulation.0", "4H", "256"),
		zimg("context_refiner.{j}"), zimg("layers.{i}"), layoutLinear("layers.{i}.adaLN_modulation.0", "4H", "256"),
		layoutLinear("final_layer.linear", "64", "H"), layoutLinear("final_layer.adaLN_modulation.1", "H", "256"),
	)
	addLayout("layout-z-image", layout{doc: "Z-Image (Lumina 2 family: refiners, then layers)", dims: map[string]int{"H": 64, "D": 16, "F": 192, "T": 128}, blocks: 2, blocks2: 1, lines: zimage})

	// HiDream-I1 is published with these names (diffusers'
	// HiDreamImageTransformer2DModel): to_out without a .0, the text
	// stream's *_t twins, bias-free SwiGLU experts and caption projections.
	hdAttn := func(p string, text bool) []string {
		l := []string{}
		suffixes := []string{""}
		if text {
			suffixes = append(suffixes, "_t")
		}
		for _, t := range suffixes {
			l = append(l, joinLines(layoutLinear(p+".to_q"+t, "H", "H"), layoutLinear(p+".to_k"+t, "H", "H"),
				layoutLinear(p+".to_v"+t, "H", "H"), layoutLinear(p+".to_out"+t, "H", "H"),
				[]string{p + ".q_rms_norm" + t + ".weight H", p + ".k_rms_norm" + t + ".weight H"})...)
		}
		return l
	}
	swiglu := func(p string) []string {
		return []string{p + ".w1.weight F H", p + ".w2.weight H F", p + ".w3.weight F H"}
	}
	moe := func(p string) []string {
		return joinLines([]string{p + ".gate.weight 4 H"}, swiglu(p+".shared_experts"), swiglu(p+".experts.0"), swiglu(p+".experts.3"))
	}
	hidream := joinLines(
		layoutLinear("x_embedder.proj", "H", "64"),
		layoutLinear("t_embedder.timestep_embedder.linear_1", "H", "256"), layoutLinear("t_embedder.timestep_embedder.linear_2", "H", "H"),
		layoutLinear("p_embedder.pooled_embedder.linear_1", "H", "2048"), layoutLinear("p_embedder.pooled_embedder.linear_2", "H", "H"),
		[]string{"caption_projection.{j}.linear.weight H T"},
		layoutLinear("double_stream_blocks.{i}.block.adaLN_modulation.1", "12H", "H"),
		hdAttn("double_stream_blocks.{i}.block.attn1", true), moe("double_stream_blocks.{i}.block.ff_i"), swiglu("double_stream_blocks.{i}.block.ff_t"),
		layoutLinear("single_stream_blocks.{i}.block.adaLN_modulation.1", "6H", "H"),
		hdAttn("single_stream_blocks.{i}.block.attn1", false), moe("single_stream_blocks.{i}.block.ff_i"),
		layoutLinear("final_layer.linear", "64", "H"), layoutLinear("final_layer.adaLN_modulation.1", "2H", "H"),
	)
	addLayout("layout-hidream", layout{doc: "HiDream-I1 (mixture-of-experts FFNs with a gate)", dims: map[string]int{"H": 64, "F": 128, "T": 128}, blocks: 2, blocks2: 2, lines: hidream})

	// Cosmos Predict2's names agree with the fragments diffusers'
	// conversion script renames (TRANSFORMER_KEYS_RENAME_DICT_COSMOS_2_0):
	// LoRA-style AdaLN pairs .1/.2 per sub-block, output_proj, q/k norms.
	cosmos := joinLines(
		layoutLinear("x_embedder.proj.1", "H", "68"), layoutLinear("t_embedder.1.linear_1", "H", "H"),
		[]string{"t_embedding_norm.weight H", "pos_embedder.dim_spatial_range 16"},
		layoutLinear("blocks.{i}.self_attn.q_proj", "H", "H"), layoutLinear("blocks.{i}.self_attn.v_proj", "H", "H"),
		layoutLinear("blocks.{i}.self_attn.output_proj", "H", "H"), []string{"blocks.{i}.self_attn.q_norm.weight 16"},
		layoutLinear("blocks.{i}.cross_attn.k_proj", "H", "T"),
		layoutLinear("blocks.{i}.adaln_modulation_self_attn.1", "H", "H"), layoutLinear("blocks.{i}.adaln_modulation_cross_attn.1", "H", "H"),
		layoutLinear("blocks.{i}.adaln_modulation_mlp.1", "16", "H"), layoutLinear("blocks.{i}.adaln_modulation_mlp.2", "3H", "16"),
		layoutLinear("blocks.{i}.mlp.layer1", "4H", "H"), layoutLinear("blocks.{i}.mlp.layer2", "H", "4H"),
		layoutLinear("final_layer.adaln_modulation.1", "16", "H"), layoutLinear("final_layer.adaln_modulation.2", "2H", "16"),
		layoutLinear("final_layer.linear", "64", "H"),
	)
	// Stable Video Diffusion: an SD 2.x-style LDM UNet (linear proj_in,
	// context 1024) whose resnets carry temporal mixers; 8 input channels
	// (noise and the conditioning frame).
	svd := joinLines(
		[]string{"input_blocks.0.0.weight H 8 3 3", "input_blocks.0.0.bias H"},
		layoutLinear("time_embed.0", "4H", "H"), layoutLinear("time_embed.2", "4H", "4H"),
		[]string{"input_blocks.{i}.0.time_mixer.mix_factor 1", "input_blocks.{i}.0.in_layers.2.weight H H 3 3"},
		layoutLinear("input_blocks.{i}.0.time_stack.emb_layers.1", "H", "4H"),
		layoutLinear("input_blocks.1.1.proj_in", "H", "H"),
		[]string{"input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight H T", "input_blocks.1.1.transformer_blocks.0.attn2.to_v.weight H T"},
		layoutLinear("middle_block.1.proj_in", "H", "H"),
		[]string{"out.2.weight 4 H 3 3", "out.2.bias 4"},
	)
	addLayout("layout-svd", layout{doc: "Stable Video Diffusion (SD 2.x-style UNet with time mixers, 9 input blocks)", dims: map[string]int{"H": 64, "T": 1024}, blocks: 9, lines: svd})

	addLayout("layout-cosmos", layout{doc: "Cosmos Predict2 (net. prefix stripped)", dims: map[string]int{"H": 64, "T": 128}, blocks: 2, lines: cosmos})

	aura := joinLines(
		layoutLinear("init_x_linear", "H", "16"), []string{"positional_encoding 1 64 H", "register_tokens 1 8 H"},
		layoutLinear("t_embedder.mlp.0", "H", "256"), layoutLinear("cond_seq_linear", "H", "T"),
		layoutLinear("double_layers.{i}.modX.1", "6H", "H"), layoutLinear("double_layers.{i}.modC.1", "6H", "H"),
		layoutLinear("double_layers.{i}.attn.w1q", "H", "H"), layoutLinear("double_layers.{i}.attn.w1v", "H", "H"),
		layoutLinear("double_layers.{i}.attn.w2q", "H", "H"), layoutLinear("double_layers.{i}.attn.w2v", "H", "H"),
		layoutLinear("single_layers.{j}.modCX.1", "6H", "H"), layoutLinear("single_layers.{j}.attn.w1q", "H", "H"),
		layoutLinear("modF.1", "2H", "H"), layoutLinear("final_linear", "16", "H"),
	)
	addLayout("layout-auraflow", layout{doc: "AuraFlow", dims: map[string]int{"H": 64, "T": 128}, blocks: 2, blocks2: 2, lines: aura})

	// Krea 2's names as independent loaders and converters of the released
	// file spell them: a text fusion over 12 encoder taps (layer-wise
	// blocks, a 12-to-1 projector, refiner blocks), a text MLP, and
	// blocks with a gated attention and a per-block modulation.
	kreaBlock := func(p string) []string {
		return []string{p + ".attn.wq.weight H H", p + ".attn.wk.weight H H", p + ".attn.wv.weight H H", p + ".attn.wo.weight H H",
			p + ".attn.gate.weight H H", p + ".attn.qknorm.qnorm.scale D", p + ".attn.qknorm.knorm.scale D",
			p + ".mlp.up.weight 4H H", p + ".mlp.down.weight H 4H", p + ".mlp.gate.weight 4H H"}
	}
	krea2 := joinLines(
		layoutLinear("first", "H", "64"), layoutLinear("tmlp.0", "H", "256"), layoutLinear("tmlp.2", "H", "H"), layoutLinear("tproj.1", "6H", "H"),
		[]string{"txtfusion.layerwise_blocks.0.prenorm.scale T", "txtfusion.layerwise_blocks.0.attn.wq.weight T T", "txtfusion.layerwise_blocks.0.attn.wk.weight T T"},
		[]string{"txtfusion.projector.weight 1 12", "txtfusion.refiner_blocks.0.mlp.down.weight T 4T"},
		[]string{"txtmlp.0.scale T"}, layoutLinear("txtmlp.1", "H", "T"), layoutLinear("txtmlp.3", "H", "H"),
		kreaBlock("blocks.{i}"), []string{"blocks.{i}.mod.lin 6 H"},
		[]string{"last.norm.scale H", "last.modulation.lin 2 H"}, layoutLinear("last.linear", "64", "H"),
	)
	addLayout("layout-krea2", layout{doc: "Krea 2 (text fusion over 12 encoder taps, gated attention)", dims: map[string]int{"H": 64, "D": 16, "T": 128}, blocks: 2, lines: krea2})

	// MiniMax-H3's original names, as diffusers' conversion script
	// (scripts/convert_minimax_h3_to_diffusers.py) maps every key of the
	// released checkpoint: a token refiner before the blocks, fused qkv,
	// a gated fc1, per-block and final AdaLN projections, and the final
	// layer's video and audio heads.
	mmBlock := func(p string) []string {
		return []string{p + ".norm1.weight H", p + ".norm2.weight H", p + ".attn.qkv_proj.weight 3H H",
			p + ".attn.q_norm.weight D", p + ".attn.k_norm.weight D", p + ".attn.out_proj.weight H H",
			p + ".mlp.fc1.weight 2F H", p + ".mlp.fc2.weight H F"}
	}
	minimax := joinLines(
		layoutLinear("video_patch_proj", "H", "P"), layoutLinear("audio_patch_proj", "H", "C"),
		layoutLinear("condition_proj", "H", "T"),
		layoutLinear("time_embedder.proj_in", "M", "256"), layoutLinear("time_embedder.proj_out", "E", "M"),
		mmBlock("token_refiner.blocks.{j}"), []string{"token_refiner.final_norm.weight H"},
		mmBlock("blocks.{i}"), layoutLinear("blocks.{i}.adaln_proj.linear", "18H", "E"),
		[]string{"final_layer.norm.weight H"}, layoutLinear("final_layer.adaln_proj.linear", "2H", "E"),
		layoutLinear("final_layer.video_out", "P", "H"), layoutLinear("final_layer.audio_out", "C", "H"),
		[]string{"rope.inv_freq 8"},
	)
	addLayout("layout-minimax-h3", layout{doc: "MiniMax-H3 (video and audio patches, token refiner, per-block AdaLN projections)",
		dims: map[string]int{"H": 64, "D": 16, "F": 128, "T": 128, "P": 96, "C": 32, "M": 64, "E": 32}, blocks: 2, blocks2: 2, lines: minimax})
}

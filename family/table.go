package family

// Tensor-name regexps shared by several rows (names without the component
// prefix). The LLM decoders' layers sit under model. (text-only files),
// model.language_model. (multimodal ones in newer transformers) or
// language_model.model. (older ones, as Gemma 3's published files).
const (
	ldmAttnKV   = `^input_blocks\.\d+\.1\.transformer_blocks\.0\.attn2\.to_k\.weight$`
	ldmProjIn   = `^input_blocks\.\d+\.1\.proj_in\.weight$`
	ldmLabelEmb = `^label_emb\.`
	ldmIn       = `^input_blocks\.0\.0\.weight$`
	dfAttnKV    = `^down_blocks\.\d+\.attentions\.0\.transformer_blocks\.0\.attn2\.to_k\.weight$`
	dfProjIn    = `^down_blocks\.0\.attentions\.0\.proj_in\.weight$`
	dfAddEmb    = `^add_embedding\.`
	hfClipTok   = `^text_model\.embeddings\.token_embedding\.weight$`
	hfClipLayer = `^text_model\.encoder\.layers\.\d+\.`
	ocClipTok   = `^token_embedding\.weight$`
	ocClipLayer = `^transformer\.resblocks\.\d+\.`
	t5Layer     = `^encoder\.block\.\d+\.layer\.0\.SelfAttention\.q\.weight$`
	t5Embed     = `^(shared|encoder\.embed_tokens)\.weight$`
	llmLayer    = `^(model\.)?(language_model\.)?(model\.)?layers\.\d+\.self_attn\.q_proj\.weight$`
	llmEmbed    = `^(model\.)?(language_model\.)?(model\.)?embed_tokens\.weight$`
	llmQNorm    = `self_attn\.q_norm\.weight$`
	ggufLLM     = `^blk\.\d+\.attn_q\.weight$`
	ldmVAE      = `^decoder\.(up\.\d+\.block\.\d+|mid\.block_1)\.`
	dfVAE       = `^decoder\.(up_blocks\.\d+\.resnets|mid_block\.resnets)\.`
	wanVAE      = `^(en|de)coder\.(down|up)samples\.\d+\.`
	fluxDouble  = `^double_blocks\.\d+\.img_attn\.`
	fluxSingle  = `^single_blocks\.\d+\.`
	flux2Mod    = `^double_stream_modulation_img\.`
	hyRefiner   = `^txt_in\.individual_token_refiner\.`
	wanQ        = `^blocks\.\d+\.self_attn\.q\.weight$`
	wanPatch    = `^patch_embedding\.weight$`
)

// Mix upgrade patterns shared by every family (llama.cpp's image-model mix
// roles as ComfyUI-GGUF's patched llama-quantize applies them).
const (
	vProj   = `(attn_v\.weight|\.to_v\.weight|\.to_v_t\.weight|\.v\.weight|\.attn\.w[12]v\.weight|_attn\.v_proj\.weight|\.add_v_proj\.weight)$`
	qkv     = `(attn_qkv\.weight|attn\.qkv\.weight|attention\.qkv\.weight)$`
	ffnDown = `(ffn_down|experts\.[0-9]+\.w2\.weight|\.shared_experts\.w2\.weight|\.ff_t\.w2\.weight|\.ffn\.2\.weight|\.ff\.net\.2\.weight|\.mlp\.layer2\.weight|\.adaln_modulation_mlp\.2\.weight|\.feed_forward\.w2\.weight|\.img_mlp\.net\.2\.weight|\.txt_mlp\.net\.2\.weight)$`
)

// Std are the upgrades every family gets; the quantizer uses them for an
// unrecognised model too.
var Std = upgrades(RoleV, vProj, RoleQKV, qkv, RoleFFNDown, ffnDown)

// Keep lists shared by several families.
var (
	unetKeep = []string{"class_embedding.", "time_embedding.", "add_embedding.", "time_embed.", "label_emb.", "conv_in.", "conv_out.", "input_blocks.0.0.weight", "out.2.weight"}
	// fluxKeep holds BFL's names and diffusers' (whose top-level proj_out
	// is the final layer while each single block has a proj_out too).
	fluxKeep = []string{"txt_in.", "img_in.", "time_in.", "vector_in.", "guidance_in.", "final_layer.",
		"^x_embedder.", "^context_embedder.", "^time_text_embed.", "^norm_out.", "^proj_out."}
	// sdModuleKeep keeps the linear layers of SD 1.x/2.x's first and
	// last blocks (input_blocks.1 and output_blocks.11, at full
	// resolution; down_blocks.0 and up_blocks.3 in diffusers' names) float
	// in module outputs: their errors reach the output unattenuated. On a
	// full-size SD 1.5 (random weights, 64x64, 2 euler steps, seeds
	// 42-45, rendered by generate as sd.cpp computes W8A8) int8_convrot
	// went from 38.17 dB mean to 41.61 dB, q8_0 giving 39.72 dB, for 0.3 %
	// more bytes: the cheapest measured set that reaches q8_0 (the others
	// and their figures are in BENCHMARKS.md). SDXL's layout differs and
	// was not measured.
	sdModuleKeep = []string{"input_blocks.1.", "output_blocks.11.",
		"down_blocks.0.resnets.0.", "down_blocks.0.attentions.0.", "up_blocks.3.resnets.2.", "up_blocks.3.attentions.2."}
	ltxKeep = []string{"adaln_single.", "caption_projection.", "patchify_proj.", "proj_out.", "scale_shift_table"}
	// clipKeep keeps CLIP's lookup tables (token and position embeddings)
	// out of every mix: measured with generate --compare on the tiny SD1
	// model, quantizing them costs more than the bytes it saves (see
	// docs/families.md), and sd.cpp never converts tensors named
	// *embedding* either.
	clipKeep = []string{"token_embedding.", "position_embedding.", "positional_embedding"}
	// Lookup tables that are 2-D .weight tensors but no linear layer.
	clipTables = []string{"token_embedding.", "position_embedding.", "positional_embedding"}
	t5Tables   = []string{"shared.weight", "embed_tokens.", "relative_attention_bias."}
	// t5Keep keeps T5's relative position bias out of mixes, as
	// llama.cpp's quantizer does (attn_rel_b); token embeddings of T5 and
	// the LLMs are quantized like llama.cpp's token_embd.
	t5Keep    = []string{"relative_attention_bias."}
	llmTables = []string{"embed_tokens.", "token_embd."}
)

// llama.cpp's tensor names for T5 encoders and Qwen, Llama and Mistral
// decoders, the inverse of the maps ComfyUI-GGUF's loader.py (795e451)
// applies to a text encoder GGUF (T5_SD_MAP, LLAMA_SD_MAP). For the llama
// architecture (Mistral, Llama 3) the loader also un-permutes the q and k
// rows with 32 heads and 8 KV heads (llama_permute), so sdtool writes them
// permuted as llama.cpp's converter does (PermuteHeads).
var (
	t5GGUF = [][2]string{
		{"encoder.block.", "enc.blk."},
		{"layer.0.SelfAttention.q.", "attn_q."}, {"layer.0.SelfAttention.k.", "attn_k."},
		{"layer.0.SelfAttention.v.", "attn_v."}, {"layer.0.SelfAttention.o.", "attn_o."},
		{"layer.0.SelfAttention.relative_attention_bias.", "attn_rel_b."}, {"layer.0.layer_norm.", "attn_norm."},
		{"layer.1.DenseReluDense.wi_0.", "ffn_gate."}, {"layer.1.DenseReluDense.wi_1.", "ffn_up."},
		{"layer.1.DenseReluDense.wo.", "ffn_down."}, {"layer.1.layer_norm.", "ffn_norm."},
		{"encoder.final_layer_norm.", "enc.output_norm."}, {"encoder.embed_tokens.", "token_embd."}, {"shared.", "token_embd."},
	}
	qwenGGUF = [][2]string{
		{"model.language_model.", "model."}, {"model.layers.", "blk."},
		{"self_attn.q_proj.", "attn_q."}, {"self_attn.k_proj.", "attn_k."}, {"self_attn.v_proj.", "attn_v."},
		{"self_attn.o_proj.", "attn_output."}, {"self_attn.q_norm.", "attn_q_norm."}, {"self_attn.k_norm.", "attn_k_norm."},
		{"mlp.gate_proj.", "ffn_gate."}, {"mlp.up_proj.", "ffn_up."}, {"mlp.down_proj.", "ffn_down."},
		{"input_layernorm.", "attn_norm."}, {"post_attention_layernorm.", "ffn_norm."},
		{"model.embed_tokens.", "token_embd."}, {"model.norm.", "output_norm."}, {"lm_head.", "output."},
	}
	// gemmaGGUF are llama.cpp's names for Gemma 3 (its convert_hf_to_gguf
	// tensor map; sd.cpp 97d2990's llm name map reads them back): the
	// four per-layer norms have names of their own, and a multimodal
	// file's language model sits under language_model.model.
	gemmaGGUF = append([][2]string{{"language_model.model.", "model."},
		{"input_layernorm.", "attn_norm."}, {"post_attention_layernorm.", "post_attention_norm."},
		{"pre_feedforward_layernorm.", "ffn_norm."}, {"post_feedforward_layernorm.", "post_ffw_norm."}}, qwenGGUF...)
)

// UNet checkpoint layouts (LDM / SGM prefixes).
var (
	sd1Parts  = []Part{{"sd1", "model.diffusion_model."}, {"vae", "first_stage_model."}, {"clip_l", "cond_stage_model.transformer."}}
	sd2Parts  = []Part{{"sd2", "model.diffusion_model."}, {"vae", "first_stage_model."}, {"clip_h", "cond_stage_model.model."}}
	sdxlParts = []Part{{"sdxl", "model.diffusion_model."}, {"vae", "first_stage_model."}, {"clip_l", "conditioner.embedders.0.transformer."}, {"clip_g", "conditioner.embedders.1.model."}}
)

// What sd.cpp's version detection reads of UNet checkpoints (sdcpp.go):
// it sees the LDM UNet and the diffusers one (its loader's "unet."), names
// SD 1.x or 2.x from the CLIP token embedding's width (768 or 1024) under
// the names in sdcppCLIPAt, and SDXL only when a second text encoder sits
// under one of sdcppSecondEncoder's prefixes; the middle block and the depth
// of some output blocks tell its distilled variants.
var (
	sdcppDiffusersAt   = []string{"unet."}
	sdcppCLIPAt        = []string{"cond_stage_model.transformer.", "", "te.", "conditioner.embedders.0.transformer."}
	sdcppOpenCLIPAt    = []string{"cond_stage_model.model.", "conditioner.embedders.0.model."}
	sdcppSecondEncoder = []Need{{Prefixes: []string{"conditioner.embedders.1", "cond_stage_model.1", "te.1"}}}
	ldmMiddle1         = `^middle_block\.1\.`
	ldmOut71           = `^output_blocks\.7\.1\.`
	ldmOut311          = `^output_blocks\.3\.1\.transformer_blocks\.1\.`
)

// Families is the table. Facts behind the detection rows: SD1's UNet uses
// 1x1-conv proj_in and context 768; SD2 linear proj_in and context 1024;
// SDXL has label_emb, depth-10 transformers at input_blocks.7/8 and context
// 2048 (the refiner 1280); inpainting UNets take 9 input channels and
// InstructPix2Pix 8; SD3 has joint_blocks (3.5 medium adds x_block.attn2,
// large is 2432 wide); Flux double_blocks and single_blocks (Fill takes 384
// input channels, Chroma replaces the guidance embedder by
// distilled_guidance_layer, Flux.2 shares its modulation across blocks and
// dev has 48 single blocks); Wan blocks.N.self_attn and a 5-D Conv3d
// patch_embedding (2.2 I2V takes 36 channels without img_emb, TI2V 5B 48);
// Qwen-Image transformer_blocks.N.img_mod; Z-Image (Lumina 2 family)
// noise_refiner, context_refiner and layers. The marker tensors of the
// video and newer families are the ones stable-diffusion.cpp's version
// detection (97d2990) and ComfyUI-GGUF's convert.py (795e451) test.
var Families = []*Family{
	// UNets.
	{
		ID: "sd1", Title: "SD 1.x", Kind: KindDiffusion, ComfyArch: "sd1", SDCpp: "sd1", Generate: true, ReshapeConv: true,
		Detect: []Rule{
			rule("", rank(ldmProjIn, 4), lacks(ldmLabelEmb)),
			rule("", rank(ldmProjIn, 4), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 768), has(ldmMiddle1)),
			rule("inpaint", rank(ldmProjIn, 4), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 768), has(ldmMiddle1), shape(ldmIn, -1, 9, -1, -1)).sd("sd1-inpaint"),
			rule("pix2pix", rank(ldmProjIn, 4), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 768), has(ldmMiddle1), shape(ldmIn, -1, 8, -1, -1)).sd("sd1-pix2pix"),
			rule("tiny-unet", rank(ldmProjIn, 4), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 768), lacks(ldmMiddle1), has(ldmOut71)).sd("sd1-tiny-unet"),
			rule("sdxs-512", rank(ldmProjIn, 4), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 768), lacks(ldmMiddle1), lacks(ldmOut71)).sd("sdxs-512-ds"),
			rule("diffusers", rank(dfProjIn, 4), lacks(dfAddEmb), shape(dfAttnKV, -1, 768)).at(sdcppDiffusersAt...),
		},
		Parts: sd1Parts, Keep: unetKeep, ModuleKeep: sdModuleKeep, Upgrades: Std,
		SDCppNeeds: []Need{{Family: "clip_l", Prefixes: []string{""}}},
		Note:       "sd.cpp names SD 1.x from CLIP-L's token embedding: a UNet without it is of no version there.",
	},
	{
		ID: "sd2", Title: "SD 2.x", Kind: KindDiffusion, ComfyArch: "sd1", SDCpp: "sd2", Generate: true, ReshapeConv: true,
		Detect: []Rule{
			rule("", rank(ldmProjIn, 2), lacks(ldmLabelEmb)),
			rule("", rank(ldmProjIn, 2), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 1024), has(ldmMiddle1)),
			rule("inpaint", rank(ldmProjIn, 2), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 1024), has(ldmMiddle1), shape(ldmIn, -1, 9, -1, -1)).sd("sd2-inpaint"),
			rule("tiny-unet", rank(ldmProjIn, 2), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 1024), lacks(ldmMiddle1)).sd("sd2-tiny-unet"),
			rule("sdxs-0.9", rank(ldmProjIn, 2), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 1024), lacks(ldmMiddle1),
				shape(`^output_blocks\.7\.1\.transformer_blocks\.0\.attn1\.to_k\.weight$`, -1, 1024)).sd("sdxs-09"),
			rule("diffusers", rank(dfProjIn, 2), lacks(dfAddEmb), shape(dfAttnKV, -1, 1024)).at(sdcppDiffusersAt...),
		},
		Parts: sd2Parts, Keep: unetKeep, ModuleKeep: sdModuleKeep, Upgrades: Std,
		SDCppNeeds: []Need{{Family: "clip_h", Prefixes: []string{""}}},
		Note:       "ComfyUI-GGUF loads SD 2.x under its sd1 architecture (same UNet names).",
	},
	{
		ID: "sdxl", Title: "SDXL", Kind: KindDiffusion, ComfyArch: "sdxl", SDCpp: "sdxl", Generate: true, ReshapeConv: true,
		Detect: []Rule{
			rule("", has(ldmLabelEmb), has(`^input_blocks\.\d+\.1\.transformer_blocks\.`)),
			rule("", has(ldmLabelEmb), has(`^input_blocks\.[78]\.1\.transformer_blocks\.9\.`), shape(ldmAttnKV, -1, 2048), has(ldmMiddle1)),
			rule("refiner", has(ldmLabelEmb), has(`^input_blocks\.\d+\.1\.transformer_blocks\.`), shape(ldmAttnKV, -1, 1280)).sd(noSDCpp),
			rule("inpaint", has(ldmLabelEmb), has(`^input_blocks\.\d+\.1\.transformer_blocks\.`), shape(ldmAttnKV, -1, 2048), has(ldmMiddle1), shape(ldmIn, -1, 9, -1, -1)).sd("sdxl-inpaint"),
			rule("pix2pix", has(ldmLabelEmb), has(`^input_blocks\.\d+\.1\.transformer_blocks\.`), shape(ldmAttnKV, -1, 2048), has(ldmMiddle1), shape(ldmIn, -1, 8, -1, -1)).sd("sdxl-pix2pix"),
			rule("ssd-1b", has(ldmLabelEmb), has(`^input_blocks\.\d+\.1\.transformer_blocks\.`), shape(ldmAttnKV, -1, 2048), lacks(ldmMiddle1), has(ldmOut311)).sd("sdxl-ssd1b"),
			rule("vega", has(ldmLabelEmb), has(`^input_blocks\.\d+\.1\.transformer_blocks\.`), shape(ldmAttnKV, -1, 2048), lacks(ldmMiddle1), lacks(ldmOut311)).sd("sdxl-vega"),
			rule("diffusers", has(dfAddEmb), has(`^down_blocks\.\d+\.attentions\.`), shape(dfAttnKV, -1, 2048)).at(sdcppDiffusersAt...),
		},
		Parts: sdxlParts, Keep: unetKeep, Upgrades: Std,
		SDCppNeeds: sdcppSecondEncoder,
		Note:       "generate runs the base and the refiner (the refiner sd.cpp does not run); inpaint only converts. sd.cpp names SDXL only when the file holds a second text encoder.",
	},
	{
		ID: "svd", Title: "Stable Video Diffusion", Kind: KindDiffusion, SDCpp: "svd",
		Detect: []Rule{
			rule("", has(`^input_blocks\.8\.0\.time_mixer\.mix_factor$`), has(`^input_blocks\.\d+\.0\.time_mixer\.`), rank(ldmProjIn, 2), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 1024)),
		},
		Keep: unetKeep, Upgrades: Std,
		Note: "An SD 2.x-style UNet with temporal mixers; detected by sd.cpp's marker, converted only.",
	},

	// DiTs.
	{
		ID: "sd3", Title: "SD 3 / 3.5", Kind: KindDiffusion, ComfyArch: "sd3", SDCpp: "sd3", Generate: true,
		Detect: []Rule{
			rule("", has(`^joint_blocks\.\d+\.context_block\.`), has(`^joint_blocks\.\d+\.x_block\.`)),
			rule("medium", has(`^joint_blocks\.\d+\.context_block\.`), has(`^joint_blocks\.\d+\.x_block\.`), shape(`^x_embedder\.proj\.weight$`, 1536, -1, -1, -1), lacks(`^joint_blocks\.\d+\.x_block\.attn2\.`)),
			rule("3.5-medium", has(`^joint_blocks\.\d+\.context_block\.`), has(`^joint_blocks\.\d+\.x_block\.attn2\.`), shape(`^x_embedder\.proj\.weight$`, 1536, -1, -1, -1)),
			rule("large", has(`^joint_blocks\.\d+\.context_block\.`), has(`^joint_blocks\.\d+\.x_block\.`), shape(`^x_embedder\.proj\.weight$`, 2432, -1, -1, -1)),
			rule("diffusers", has(`^transformer_blocks\.\d+\.ff_context\.`), has(`^pos_embed\.proj\.weight$`), lacks(`^single_transformer_blocks\.`), lacks(`\.img_mod\.`)).sd(noSDCpp),
		},
		Parts:    []Part{{"sd3", "model.diffusion_model."}, {"clip_l", "text_encoders.clip_l.transformer."}, {"clip_g", "text_encoders.clip_g.transformer."}, {"t5xxl", "text_encoders.t5xxl.transformer."}, {"flux_vae", "first_stage_model."}},
		Keep:     []string{"final_layer.", "time_text_embed.", "context_embedder.", "t_embedder.", "y_embedder.", "x_embedder.", "proj_out.weight", "pos_embed", "^norm_out."},
		Upgrades: Std,
		Note:     "generate runs the SD3 checkpoint layout (not diffusers'). sd.cpp finds SD3 by joint_blocks only, so a diffusers SD3 is of no version there. 3.5 large is 2432 wide: rows of 2432 are not whole 256-element k-quant blocks, so k-quant mixes take the legacy fallbacks (q4_K to q5_0, q5_K to q5_1, q6_K to q8_0).",
	},
	{
		ID: "flux", Title: "Flux.1", Kind: KindDiffusion, ComfyArch: "flux", SDCpp: "flux", Generate: true,
		Detect: []Rule{
			rule("dev", has(fluxDouble), has(fluxSingle), has(`^guidance_in\.`), lacks(flux2Mod), lacks(hyRefiner)),
			rule("schnell", has(fluxDouble), has(fluxSingle), lacks(`^guidance_in\.`), lacks(`^distilled_guidance_layer\.`), lacks(flux2Mod), lacks(hyRefiner)),
			rule("fill", has(fluxDouble), has(fluxSingle), has(`^guidance_in\.`), lacks(flux2Mod), lacks(hyRefiner), shape(`^img_in\.weight$`, -1, 384)).sd("flux-fill"),
			rule("kontext", has(fluxDouble), has(fluxSingle), has(`^guidance_in\.`), lacks(flux2Mod), lacks(hyRefiner), meta("kontext")),
			rule("controls", has(fluxDouble), has(fluxSingle), has(`^guidance_in\.`), lacks(flux2Mod), lacks(hyRefiner), shape(`^img_in\.weight$`, -1, 128)).sd("flux-controls"),
			rule("flex-2", has(fluxDouble), has(fluxSingle), has(`^guidance_in\.`), lacks(flux2Mod), lacks(hyRefiner), shape(`^img_in\.weight$`, -1, 196)).sd("flex-2"),
			rule("diffusers", has(`^transformer_blocks\.\d+\.attn\.add_q_proj\.`), has(`^single_transformer_blocks\.\d+\.`)),
		},
		Parts: []Part{{"flux", "model.diffusion_model."}, {"clip_l", "text_encoders.clip_l.transformer."}, {"t5xxl", "text_encoders.t5xxl.transformer."}, {"flux_vae", "vae."}},
		Keep:  fluxKeep, Upgrades: Std,
		Note: "generate runs dev and schnell; Fill and Kontext are converted only. Kontext has dev's tensors: only metadata that names it tells them apart.",
	},
	{
		ID: "chroma", Title: "Chroma", Kind: KindDiffusion, ComfyArch: "flux", SDCpp: "flux", Generate: true,
		Detect: []Rule{
			rule("", has(fluxDouble), has(fluxSingle), has(`^distilled_guidance_layer\.`), lacks(`^guidance_in\.`)),
			rule("radiance", has(fluxDouble), has(fluxSingle), has(`^distilled_guidance_layer\.`), lacks(`^guidance_in\.`), has(`^nerf_final_layer_conv\.`)).sd("chroma-radiance"),
		},
		Keep: with(fluxKeep, "distilled_guidance_layer."), Upgrades: Std,
		Note: "Flux.1 without the modulation layers: ComfyUI-GGUF loads it under its flux architecture, sd.cpp as a Flux variant. generate runs Chroma; Radiance is converted only.",
	},
	{
		ID: "flux2", Title: "Flux.2", Kind: KindDiffusion, ComfyArch: "flux", SDCpp: "flux2", Generate: true,
		Detect: []Rule{
			rule("klein", has(fluxDouble), has(fluxSingle), has(flux2Mod), has(`^single_stream_modulation\.`)).sd("flux2-klein"),
			rule("dev", has(fluxDouble), has(fluxSingle), has(flux2Mod), has(`^single_stream_modulation\.`), has(`^single_blocks\.47\.`)),
		},
		Keep:     with(fluxKeep, "double_stream_modulation_img.", "double_stream_modulation_txt.", "single_stream_modulation."),
		Upgrades: Std,
		Note:     "The modulation tensors are shared by every block and stay high precision. sd.cpp tells dev (flux2) from klein by single block 47. generate runs klein.",
	},
	{
		ID: "wan", Title: "Wan 2.1 / 2.2", Kind: KindDiffusion, ComfyArch: "wan", SDCpp: "wan2", Generate: true,
		Detect: []Rule{
			rule("t2v", has(wanQ), rank(wanPatch, 5)),
			rule("t2v", has(wanQ), rank(wanPatch, 4)), // a Conv3d kernel as sd.cpp holds it (its GGUF files)
			rule("s2v", has(wanQ), rank(wanPatch, 5), has(`^(casual_audio_encoder\.|audio_injector\.injector\.0\.q\.weight)`), has(`^blocks\.0\.cross_attn\.norm_k\.weight$`)).sd("wan2.2-s2v"),
			rule("i2v", has(wanQ), rank(wanPatch, 5), has(`^img_emb\.`)),
			rule("2.2-i2v", has(wanQ), shape(wanPatch, -1, 36, -1, -1, -1), lacks(`^img_emb\.`)).sdIf("wan2.2-i2v", shape(wanPatch, 5120, 36, -1, -1, -1)),
			rule("ti2v-5b", has(wanQ), shape(wanPatch, -1, 48, -1, -1, -1), lacks(`^img_emb\.`)).sdIf("wan2.2-ti2v", shape(wanPatch, 3072, 48, -1, -1, -1)),
			rule("a14b-high-noise", has(wanQ), rank(wanPatch, 5), meta("high_noise")),
			rule("a14b-low-noise", has(wanQ), rank(wanPatch, 5), meta("low_noise")),
			rule("diffusers", has(`^blocks\.\d+\.attn1\.to_q\.weight$`), rank(wanPatch, 5)).sd(noSDCpp),
		},
		Keep:     []string{"modulation.", "patch_embedding.", "text_embedding.", "time_projection.", "time_embedding.", "img_emb.", "head."},
		F32:      []string{".modulation", "head.modulation"},
		Upgrades: Std,
		Note:     "sd.cpp tells Wan 2.2 I2V and TI2V by the patch embedding's out×in channels (5120×36, 3072×48), so a narrower model is Wan 2.1 to it. sd.cpp finds Wan by blocks.0.cross_attn.norm_k, which diffusers' names lack. The 5-D patch embedding is folded to 4-D in GGUF (comfy.gguf.orig_shape keeps it). A14B's high- and low-noise experts have the same tensors; metadata that names them tells them apart.",
	},
	{
		ID: "hunyuan_video", Title: "HunyuanVideo", Kind: KindDiffusion, ComfyArch: "hyvid", SDCpp: "hunyuan-video",
		Detect: []Rule{
			rule("", has(hyRefiner), has(`^double_blocks\.\d+\.`)),
			rule("1.5", has(hyRefiner), has(`^double_blocks\.\d+\.`), has(`^byt5_in\.`)),
		},
		// fluxKeep's "txt_in." keeps the whole token refiner (two blocks) in
		// F16, as ComfyUI-GGUF's patched llama-quantize does for hyvid
		// (checked at 795e451); publishers compare against its files.
		Keep:      with(fluxKeep, "byt5_in.", "vision_in.", "cond_type_embedding"),
		NotLinear: []string{"cond_type_embedding"},
		Upgrades:  Std,
		Note:      "1.5's names checked against diffusers' conversion script: separate q/k/v per stream (img_attn_q, ...), img_mod.linear, mlp.fc1/fc2.",
	},
	{
		ID: "ltxv", Title: "LTX-Video", Kind: KindDiffusion, ComfyArch: "ltxv", SDCpp: "ltxav",
		Detect: []Rule{
			rule("", has(`^adaln_single\.emb\.timestep_embedder\.`), has(`^transformer_blocks\.\d+\.scale_shift_table$`), has(`^caption_projection\.`), lacks(`^audio_patchify_proj\.`)),
		},
		Keep: ltxKeep, F32: []string{"scale_shift_table"}, Upgrades: Std,
		Note: "sd.cpp runs LTX-2 only but names every LTX model by adaln_single's timestep embedder, as LTX-2 (ltxav).",
	},
	{
		ID: "ltx2", Title: "LTX-2", Kind: KindDiffusion, ComfyArch: "ltxv", SDCpp: "ltxav",
		Detect: []Rule{
			rule("", has(`^adaln_single\.emb\.timestep_embedder\.`), has(`^audio_patchify_proj\.`)),
		},
		Keep:     with(ltxKeep, "audio_adaln_single.", "audio_caption_projection.", "audio_patchify_proj.", "audio_proj_out.", "prompt_adaln_single.", "av_ca_"),
		F32:      []string{"scale_shift_table"},
		Upgrades: Std,
		Note:     "Audio and video streams; ComfyUI-GGUF loads it under ltxv.",
	},
	{
		ID: "qwen_image", Title: "Qwen-Image", Kind: KindDiffusion, ComfyArch: "qwen_image", SDCpp: "qwen-image", Generate: true,
		Detect: []Rule{
			rule("", has(`^transformer_blocks\.\d+\.img_mod\.`), has(`^transformer_blocks\.\d+\.txt_mod\.`), lacks(`^time_text_embed\.addition_t_embedding\.`)),
			rule("edit", has(`^transformer_blocks\.\d+\.img_mod\.`), has(`^transformer_blocks\.\d+\.txt_mod\.`), lacks(`^time_text_embed\.addition_t_embedding\.`), meta("edit")),
			rule("mage-flow", has(`^transformer_blocks\.\d+\.img_mod\.`), has(`^transformer_blocks\.\d+\.txt_mod\.`), lacks(`^time_text_embed\.addition_t_embedding\.`), shape(`^img_in\.weight$`, -1, 128)).sd("mage-flow"),
		},
		Keep:     []string{"img_in.", "txt_in.", "time_text_embed.", "proj_out.", "norm_out."},
		Upgrades: with(Std, Upgrade{Role: RoleEdgeBlock, Pattern: mustRE(`transformer_blocks\.([0-9]+)\.`)}),
		Note:     "Edit has the same tensors: only metadata that names it tells them apart.",
	},
	{
		ID: "z_image", Title: "Z-Image", Kind: KindDiffusion, ComfyArch: "lumina2", SDCpp: "z-image", Generate: true,
		Detect: []Rule{
			rule("", has(`^noise_refiner\.\d+\.`), has(`^context_refiner\.\d+\.`), has(`^layers\.\d+\.`)),
		},
		Keep:     []string{"t_embedder.", "x_embedder.", "final_layer.", "cap_embedder.", "context_refiner.", "noise_refiner.", "x_pad_token", "cap_pad_token"},
		F32:      []string{"x_pad_token", "cap_pad_token"},
		Upgrades: Std,
		Note:     "Lumina 2 family: ComfyUI-GGUF names it lumina2.",
	},
	{
		ID: "hidream", Title: "HiDream-I1", Kind: KindDiffusion, ComfyArch: "hidream",
		Detect: []Rule{
			rule("", has(`^caption_projection\.\d+\.linear\.weight$`), has(`^double_stream_blocks\.\d+\.block\.ff_i\.shared_experts\.`)),
		},
		Keep:     []string{"p_embedder.", "t_embedder.", "x_embedder.", "final_layer.", ".ff_i.gate.weight", "caption_projection."},
		F32:      []string{".ff_i.gate.weight", "img_emb.emb_pos"},
		Upgrades: Std,
	},
	{
		ID: "cosmos", Title: "Cosmos Predict2", Kind: KindDiffusion, ComfyArch: "cosmos",
		Detect: []Rule{
			rule("", has(`^blocks\.\d+\.mlp\.layer1\.weight$`), has(`^blocks\.\d+\.adaln_modulation_cross_attn\.`)),
			rule("anima", has(`^blocks\.\d+\.mlp\.layer1\.weight$`), has(`^blocks\.\d+\.adaln_modulation_cross_attn\.`), has(`^llm_adapter\.blocks\.0\.cross_attn\.q_proj\.weight$`)).sd("anima"),
		},
		// sd.cpp finds Anima's LLM adapter under any prefix.
		SDCppAt:  []string{"model.diffusion_model.", "diffusion_model.", "net.", ""},
		Note:     "Anima is Cosmos Predict2 with an LLM adapter; sd.cpp knows it (anima), not Cosmos itself.",
		Keep:     []string{"p_embedder.", "t_embedder.", "x_embedder.", "t_embedding_norm.", "pos_embedder.", "final_layer."},
		F32:      []string{"pos_embedder"},
		Upgrades: Std,
	},
	{
		ID: "aura", Title: "AuraFlow", Kind: KindDiffusion, ComfyArch: "aura",
		Detect: []Rule{
			rule("", has(`^double_layers\.\d+\.modX\.`), has(`^single_layers\.\d+\.`)),
		},
		Keep:      []string{"t_embedder.", "init_x_linear.", "modF.1.weight", "cond_seq_linear.weight", "final_linear.weight", "positional_encoding", "register_tokens"},
		NotLinear: []string{"positional_encoding", "register_tokens"},
		Upgrades:  Std,
	},
	{
		ID: "krea2", Title: "Krea 2", Kind: KindDiffusion, SDCpp: "krea2",
		Detect: []Rule{
			rule("", has(`^(txtfusion|text_fusion)\.projector\.weight$`)),
		},
		Keep:     []string{"first.", "last.", "tmlp.", "tproj.", "txtmlp.", "txtfusion.projector.", "text_fusion.projector.", ".mod.lin"},
		Upgrades: Std,
		Note:     "ComfyUI-GGUF has no architecture name for it.",
	},
	{
		ID: "minimax_h3", Title: "MiniMax-H3", Kind: KindDiffusion, SDCpp: "minimax-h3",
		Detect: []Rule{
			rule("", has(`^video_patch_proj\.weight$`), has(`^audio_patch_proj\.weight$`)),
		},
		Keep:     []string{"video_patch_proj.", "audio_patch_proj.", "time_embedder.", "condition_proj.", "final_layer.", "rope."},
		Upgrades: Std,
		Note:     "ComfyUI-GGUF has no architecture name for it. The blocks' AdaLN projections (a third of the weights) are quantized, as Flux's per-block modulation is; the final layer's stays.",
	},

	// Text encoders.
	{
		ID: "clip", Title: "CLIP text model (width unknown)", Kind: KindTextEncoder,
		Detect: []Rule{rule("", has(hfClipLayer)), rule("open_clip", has(ocClipLayer))},
		Keep:   clipKeep, NotLinear: clipTables, Upgrades: Std,
	},
	{
		ID: "clip_l", Title: "CLIP-L", Kind: KindTextEncoder, SDCpp: "sdxs-512-ds", SDCppAt: sdcppCLIPAt,
		Detect: []Rule{rule("", has(hfClipLayer), shape(hfClipTok, -1, 768)), rule("open_clip", has(ocClipLayer), shape(ocClipTok, -1, 768)).at(sdcppOpenCLIPAt...)},
		Keep:   clipKeep, NotLinear: clipTables, Upgrades: Std,
		Note: "sd.cpp reads SD 1.x from this token embedding's width and its variant from the UNet: a file with CLIP-L and no UNet is SDXS-512 (sdxs-512-ds) to it.",
	},
	{
		ID: "clip_h", Title: "OpenCLIP ViT-H", Kind: KindTextEncoder, SDCpp: "sd2-tiny-unet", SDCppAt: sdcppCLIPAt,
		Detect: []Rule{rule("", has(hfClipLayer), shape(hfClipTok, -1, 1024)), rule("open_clip", has(ocClipLayer), shape(ocClipTok, -1, 1024)).at(sdcppOpenCLIPAt...)},
		Keep:   clipKeep, NotLinear: clipTables, Upgrades: Std,
		Note: "sd.cpp reads SD 2.x from this token embedding's width: a file with it and no UNet is an SD 2.x tiny UNet (sd2-tiny-unet) to it.",
	},
	{
		ID: "clip_g", Title: "CLIP-G (OpenCLIP bigG)", Kind: KindTextEncoder,
		Detect: []Rule{rule("", has(hfClipLayer), shape(hfClipTok, -1, 1280)), rule("open_clip", has(ocClipLayer), shape(ocClipTok, -1, 1280))},
		Keep:   clipKeep, NotLinear: clipTables, Upgrades: Std,
	},
	{
		ID: "t5", Title: "T5 encoder (width unknown)", Kind: KindTextEncoder, ComfyArch: "t5encoder",
		Detect: []Rule{rule("", has(t5Layer))},
		Keep:   t5Keep, NotLinear: t5Tables, Upgrades: Std, GGUFNames: t5GGUF,
	},
	{
		ID: "t5xxl", Title: "T5-XXL", Kind: KindTextEncoder, ComfyArch: "t5encoder",
		Detect: []Rule{rule("", has(t5Layer), shape(t5Layer, -1, 4096))},
		Keep:   t5Keep, NotLinear: t5Tables, Upgrades: Std, GGUFNames: t5GGUF,
	},
	{
		ID: "umt5xxl", Title: "UMT5-XXL", Kind: KindTextEncoder, ComfyArch: "t5encoder",
		Detect: []Rule{rule("", has(t5Layer), shape(t5Layer, -1, 4096), shape(t5Embed, 256384, -1))},
		Keep:   t5Keep, NotLinear: t5Tables, Upgrades: Std, GGUFNames: t5GGUF,
		Note: "Wan's text encoder; ComfyUI-GGUF rebuilds its tokenizer from the GGUF's tokenizer.ggml.* keys.",
	},
	{
		ID: "llm", Title: "decoder-only LLM (unknown)", Kind: KindTextEncoder,
		Detect:    []Rule{rule("", has(llmLayer)), rule("gguf", has(ggufLLM))},
		NotLinear: llmTables, Upgrades: Std,
	},
	{
		ID: "qwen3", Title: "Qwen3", Kind: KindTextEncoder, ComfyArch: "qwen3",
		Detect:    []Rule{rule("", has(llmLayer), has(llmQNorm), shape(llmEmbed, 151936, -1), lacks(`pre_feedforward_layernorm`))},
		NotLinear: llmTables, Upgrades: Std, GGUFNames: qwenGGUF,
		Note: "Z-Image's and Flux.2 klein's text encoder.",
	},
	{
		ID: "qwen2.5vl", Title: "Qwen2.5-VL", Kind: KindTextEncoder, ComfyArch: "qwen2vl",
		Detect:    []Rule{rule("", has(llmLayer), lacks(llmQNorm), shape(llmEmbed, 152064, -1))},
		NotLinear: llmTables, Upgrades: Std, GGUFNames: qwenGGUF,
		Note: "Qwen-Image's text encoder.",
	},
	{
		ID: "llama3", Title: "Llama 3", Kind: KindTextEncoder, ComfyArch: "llama",
		Detect:    []Rule{rule("", has(llmLayer), shape(llmEmbed, 128256, -1))},
		NotLinear: llmTables, Upgrades: Std, GGUFNames: qwenGGUF, PermuteHeads: [2]int{32, 8},
		Note: "HiDream's fourth text encoder.",
	},
	{
		ID: "mistral", Title: "Mistral Small", Kind: KindTextEncoder, ComfyArch: "llama",
		Detect:    []Rule{rule("", has(llmLayer), shape(llmEmbed, 131072, -1))},
		NotLinear: llmTables, Upgrades: Std, GGUFNames: qwenGGUF, PermuteHeads: [2]int{32, 8},
		Note: "Flux.2 dev's text encoder (ComfyUI-GGUF: llama architecture, Tekken tokenizer).",
	},
	{
		ID: "gemma3", Title: "Gemma 3", Kind: KindTextEncoder,
		Detect:    []Rule{rule("", has(llmLayer), has(llmQNorm), has(`layers\.\d+\.pre_feedforward_layernorm\.weight$`))},
		NotLinear: llmTables, Upgrades: Std, GGUFNames: gemmaGGUF, GGUFArch: "gemma3", NormShift: 1,
		Note: "LTX-2's text encoder. Its GGUF has llama.cpp's names and norms (+1), which sd.cpp reads; ComfyUI-GGUF's text loader has no gemma3 architecture.",
	},

	// VAEs.
	{
		ID: "vae", Title: "SD / SDXL VAE (4 channels)", Kind: KindVAE,
		Detect: []Rule{
			rule("", has(ldmVAE)),
			rule("4ch", has(ldmVAE), shape(`^decoder\.conv_in\.weight$`, -1, 4, -1, -1)),
			rule("diffusers", has(dfVAE)),
		},
	},
	{
		ID: "flux_vae", Title: "Flux / SD3 VAE (16 channels)", Kind: KindVAE,
		Detect: []Rule{rule("16ch", has(ldmVAE), shape(`^decoder\.conv_in\.weight$`, -1, 16, -1, -1))},
	},
	{
		ID: "wan_vae", Title: "Wan VAE", Kind: KindVAE,
		Detect: []Rule{
			rule("", has(wanVAE)),
			rule("2.1", has(wanVAE), shape(`^decoder\.conv1\.weight$`, -1, 16, -1, -1, -1)),
			rule("2.2", has(wanVAE), shape(`^decoder\.conv1\.weight$`, -1, 48, -1, -1, -1)),
		},
		Note: "Wan 2.1's (16 latent channels, also Qwen-Image's) and Wan 2.2's (48).",
	},
	{
		ID: "ltx_vae", Title: "LTX VAE", Kind: KindVAE,
		Detect: []Rule{rule("", has(`^per_channel_statistics\.`), has(`^decoder\.up_blocks\.\d+\.res_blocks\.`))},
	},
}

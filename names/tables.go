package names

import (
	"bytes"
	"strconv"
)

// This file holds the naming knowledge as data: which prefixes, substrings
// and whole names sd.cpp renames, per part of the model. The block layouts
// of the UNets, the VAE and the DiTs are expanded into plain rename lists
// once, at package initialisation.

// Top-level prefixes, tried in this order, first match wins. sd.cpp keeps
// them in an unordered_map; two pairs of keys overlap, and its iteration
// order (observed with libstdc++, reference §8) lets "text_encoder." win over
// "text_encoder.2." and "conditioner.embedders.0.open_clip." over
// "conditioner.embedders.0.". The key set is the same for every version, so
// that order does not change with the version either.
//
// The three version-dependent entries are marked: te1. (Flux.1 only) and
// clip_l./clip_g. (UNet models keep their CLIPs under cond_stage_model).
const (
	markTE1   = "\x00te1"
	markCLIPL = "\x00clip_l"
	markCLIPG = "\x00clip_g"
)

var topPrefixes = prefixList{
	{"diffusion_model.", "model.diffusion_model."},
	{"unet.", "model.diffusion_model."},
	{"transformer.", "model.diffusion_model."},
	{"vae.", "first_stage_model."},
	{"text_encoders.llm.text_embedding_projection.", "text_embedding_projection."},
	{"text_encoder.", "cond_stage_model.transformer."},
	{"text_encoder.2.", "cond_stage_model.1.transformer."}, // shadowed by "text_encoder.", as in sd.cpp
	{"te.", "cond_stage_model.transformer."},
	{"conditioner.embedders.0.open_clip.", "cond_stage_model."},
	{"conditioner.embedders.0.", "cond_stage_model."},
	{"conditioner.embedders.1.", "cond_stage_model.1."},
	{"te2.", "cond_stage_model.1.transformer."},
	{"te1.", markTE1},
	{"te3.", "text_encoders.t5xxl.transformer."},
	{"clip_vision.", "cond_stage_model.transformer."},
	{"clip_l.", markCLIPL},
	{"clip_g.", markCLIPG},
}

// topPrefixesFor resolves the marked entries for one flavour of version.
func topPrefixesFor(flux, unet bool) *byFirstByte {
	l := make(prefixList, len(topPrefixes))
	copy(l, topPrefixes)
	for i, p := range l {
		switch p.to {
		case markTE1:
			l[i].to = "cond_stage_model.transformer."
			if flux {
				l[i].to = "text_encoders.clip_l.transformer."
			}
		case markCLIPL:
			l[i].to = "text_encoders.clip_l.transformer."
			if unet {
				l[i].to = "cond_stage_model.transformer."
			}
		case markCLIPG:
			l[i].to = "text_encoders.clip_g.transformer."
			if unet {
				l[i].to = "cond_stage_model.1.transformer."
			}
		}
	}
	return indexPrefixes(l)
}

var (
	topUNet  = topPrefixesFor(false, true)
	topFlux  = topPrefixesFor(true, false)
	topOther = topPrefixesFor(false, false)
)

// The three parts of a model, recognised by prefix after the top-level
// renames, in sd.cpp's order. The rest of the name is converted by the part's
// own rules and the prefix is put back.
const (
	diffusionPrefix  = "model.diffusion_model."
	firstStagePrefix = "first_stage_model."
)

var condPrefixes = []string{"cond_stage_model.1.", "cond_stage_model.", "conditioner.embedders.", "text_encoders."}

// --- UNet (diffusers -> LDM), SD 1.x/2.x and SDXL ---

// unetLayout describes which diffusers blocks a UNet flavour maps; it mirrors
// the ranges sd.cpp's rename lists cover, including entries no real
// checkpoint has (they are harmless, and keeping them keeps the rule order).
type unetLayout struct {
	levels    int              // down/up block levels
	downAttn  func(i int) bool // down_blocks.i has attentions
	upResnets int              // resnets listed per up block
	upAttn    func(i int) bool // up_blocks.i has attentions
	samplers  int              // levels with a downsampler and an upsampler
	fixups    []pair           // renames of what the generated rules produced
}

var (
	sd1Layout = unetLayout{
		levels:    4,
		downAttn:  func(i int) bool { return i < 3 },
		upResnets: 3,
		upAttn:    func(int) bool { return true }, // up_blocks.0 too: the tiny UNets have one
		samplers:  3,
	}
	sdxlLayout = unetLayout{
		levels:    3,
		downAttn:  func(i int) bool { return i > 0 },
		upResnets: 4,
		upAttn:    func(i int) bool { return i < 2 },
		samplers:  3,
		// SDXL's up_blocks.0 has attentions, so its upsampler is the third
		// module of output_blocks.2, not the second as in SD 1.x.
		fixups: []pair{{"output_blocks.2.1.conv.", "output_blocks.2.2.conv."}},
	}
)

// Whole diffusers names of the UNet's stem and head.
var unetStem = map[string]string{
	"time_embedding.linear_1.weight": "time_embed.0.weight",
	"time_embedding.linear_1.bias":   "time_embed.0.bias",
	"time_embedding.linear_2.weight": "time_embed.2.weight",
	"time_embedding.linear_2.bias":   "time_embed.2.bias",
	"conv_in.weight":                 "input_blocks.0.0.weight",
	"conv_in.bias":                   "input_blocks.0.0.bias",
	"conv_norm_out.weight":           "out.0.weight",
	"conv_norm_out.bias":             "out.0.bias",
	"conv_out.weight":                "out.2.weight",
	"conv_out.bias":                  "out.2.bias",
}

// SDXL adds the size/crop conditioning embedding.
var sdxlStemExtra = map[string]string{
	"add_embedding.linear_1.weight": "label_emb.0.0.weight",
	"add_embedding.linear_1.bias":   "label_emb.0.0.bias",
	"add_embedding.linear_2.weight": "label_emb.0.2.weight",
	"add_embedding.linear_2.bias":   "label_emb.0.2.bias",
}

// Inside a resnet: applied only to names that contain "resnets".
var unetResnet = substRules{rules: []pair{
	{"norm1", "in_layers.0"},
	{"conv1", "in_layers.2"},
	{"norm2", "out_layers.0"},
	{"conv2", "out_layers.3"},
	{"time_emb_proj", "emb_layers.1"},
	{"conv_shortcut", "skip_connection"},
}}

// Attention output projections stored without the Sequential index.
var unetTail = substRules{rules: []pair{
	{"to_out.weight", "to_out.0.weight"},
	{"to_out.bias", "to_out.0.bias"},
}, guards: []string{"to_out."}}

func itoa(i int) string { return strconv.Itoa(i) }

// diffusersBlock is the guard of the UNet and VAE block renames: it reports
// whether s contains "down_block", "up_block" or "mid_block" (a "_block"
// after n, p or d), or SDXL's "output_blocks.2.1.conv.". One scan for
// "_block" replaces a search per head, and original names, which only have
// input_, output_, middle_ and transformer_blocks, fail it at once.
func diffusersBlock(b []byte) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], blockWord)
		if j < 0 {
			return false
		}
		j += i
		if j > 0 {
			switch b[j-1] {
			case 'n', 'p', 'd':
				return true
			}
		}
		if j >= 6 && bytes.HasPrefix(b[j-6:], sdxlFixup) {
			return true
		}
		i = j + len(blockWord)
	}
}

var (
	blockWord = []byte("_block")
	sdxlFixup = []byte("output_blocks.2.1.conv.")
)

// blocks expands a layout into the ordered block renames.
func (l unetLayout) blocks() substRules {
	var r []pair
	add := func(from, to string) { r = append(r, pair{from, to}) }
	for i := 0; i < l.levels; i++ {
		for j := 0; j < 2; j++ {
			in := itoa(3*i + j + 1)
			add("down_blocks."+itoa(i)+".resnets."+itoa(j)+".", "input_blocks."+in+".0.")
			if l.downAttn(i) {
				add("down_blocks."+itoa(i)+".attentions."+itoa(j)+".", "input_blocks."+in+".1.")
			}
		}
		for j := 0; j < l.upResnets; j++ {
			out := itoa(3*i + j)
			add("up_blocks."+itoa(i)+".resnets."+itoa(j)+".", "output_blocks."+out+".0.")
			if l.upAttn(i) {
				add("up_blocks."+itoa(i)+".attentions."+itoa(j)+".", "output_blocks."+out+".1.")
			}
		}
		if i < l.samplers {
			add("down_blocks."+itoa(i)+".downsamplers.0.conv.", "input_blocks."+itoa(3*(i+1))+".0.op.")
			up := "2."
			if i == 0 {
				up = "1."
			}
			add("up_blocks."+itoa(i)+".upsamplers.0.", "output_blocks."+itoa(3*i+2)+"."+up)
		}
	}
	r = append(r, l.fixups...)
	add("mid_block.attentions.0.", "middle_block.1.")
	add("mid_block.resnets.0.", "middle_block.0.")
	add("mid_block.resnets.1.", "middle_block.2.")
	return substRules{rules: r, blocks: true}
}

// unetRules is the whole diffusers -> LDM conversion of one UNet flavour.
type unetRules struct {
	stem   map[string]string
	blocks substRules
}

func newUNetRules(l unetLayout, extraStem map[string]string) *unetRules {
	u := &unetRules{stem: map[string]string{}, blocks: l.blocks()}
	for k, v := range unetStem {
		u.stem[k] = v
	}
	for k, v := range extraStem {
		u.stem[k] = v
	}
	return u
}

var (
	sd1UNet  = newUNetRules(sd1Layout, nil)
	sdxlUNet = newUNetRules(sdxlLayout, sdxlStemExtra)
)

// --- ControlNet (diffusers -> LDM), SDXL only ---

// Names a bare diffusers ControlNet (or UNet) starts with.
var controlNetHeads = []string{
	"controlnet_cond_embedding.", "controlnet_down_blocks.", "controlnet_mid_block.",
	"down_blocks.", "mid_block.", "time_embedding.", "add_embedding.", "conv_in.",
}

var controlNetPrefixes = prefixList{
	{"controlnet_cond_embedding.conv_in.", "input_hint_block.0."},
	{"controlnet_cond_embedding.blocks.0.", "input_hint_block.2."},
	{"controlnet_cond_embedding.blocks.1.", "input_hint_block.4."},
	{"controlnet_cond_embedding.blocks.2.", "input_hint_block.6."},
	{"controlnet_cond_embedding.blocks.3.", "input_hint_block.8."},
	{"controlnet_cond_embedding.blocks.4.", "input_hint_block.10."},
	{"controlnet_cond_embedding.blocks.5.", "input_hint_block.12."},
	{"controlnet_cond_embedding.conv_out.", "input_hint_block.14."},
	{"controlnet_mid_block.", "middle_block_out.0."},
}

// --- VAE (diffusers -> LDM), the SD/SDXL/Flux autoencoder ---

// Whole-part prefixes some single-file VAEs use for the quantisation convs.
var vaeOuterPrefixes = prefixList{
	{"decoder.post_quant_conv.", "post_quant_conv."},
	{"encoder.quant_conv.", "quant_conv."},
}

var vaeBase = substRules{rules: []pair{
	{"conv_shortcut", "nin_shortcut"},
	{"conv_norm_out", "norm_out"},
	{"mid_block.attentions.0.", "mid.attn_1."},
}}

func vaeBlocks() substRules {
	var r []pair
	add := func(from, to string) { r = append(r, pair{from, to}) }
	for i := 0; i < 4; i++ {
		for j := 0; j < 2; j++ {
			add("encoder.down_blocks."+itoa(i)+".resnets."+itoa(j)+".", "encoder.down."+itoa(i)+".block."+itoa(j)+".")
		}
		if i < 3 {
			add("down_blocks."+itoa(i)+".downsamplers.0.", "down."+itoa(i)+".downsample.")
			// The decoder's levels run the other way round in LDM.
			add("up_blocks."+itoa(i)+".upsamplers.0.", "up."+itoa(3-i)+".upsample.")
		}
		for j := 0; j < 3; j++ {
			add("decoder.up_blocks."+itoa(i)+".resnets."+itoa(j)+".", "decoder.up."+itoa(3-i)+".block."+itoa(j)+".")
		}
	}
	add("mid_block.resnets.0.", "mid.block_1.")
	add("mid_block.resnets.1.", "mid.block_2.")
	return substRules{rules: r, blocks: true}
}

var vaeBlockRules = vaeBlocks()

// Old diffusers attention names; applied only when the input name contains
// "attentions".
var vaeAttnOld = substRules{rules: []pair{
	{"group_norm.", "norm."},
	{"query.", "q."},
	{"key.", "k."},
	{"value.", "v."},
	{"proj_attn.", "proj_out."},
}}

// New diffusers attention names; applied when the result is the LDM mid
// attention.
var vaeAttnNew = substRules{rules: []pair{
	{"to_q", "q"},
	{"to_k", "k"},
	{"to_v", "v"},
	{"to_out.0", "proj_out"},
}, guards: []string{"to_"}}

// --- Text encoders ---

// open_clip names that are renamed as a whole (relative to cond_stage_model.).
var openCLIPWhole = map[string]string{
	"model.ln_final.bias":               "transformer.text_model.final_layer_norm.bias",
	"model.ln_final.weight":             "transformer.text_model.final_layer_norm.weight",
	"model.positional_embedding":        "transformer.text_model.embeddings.position_embedding.weight",
	"model.token_embedding.weight":      "transformer.text_model.embeddings.token_embedding.weight",
	"model.text_projection":             "transformer.text_model.text_projection",
	"model.visual.class_embedding":      "transformer.vision_model.embeddings.class_embedding",
	"model.visual.conv1.weight":         "transformer.vision_model.embeddings.patch_embedding.weight",
	"model.visual.ln_post.bias":         "transformer.vision_model.post_layernorm.bias",
	"model.visual.ln_post.weight":       "transformer.vision_model.post_layernorm.weight",
	"model.visual.ln_pre.bias":          "transformer.vision_model.pre_layernorm.bias",
	"model.visual.ln_pre.weight":        "transformer.vision_model.pre_layernorm.weight",
	"model.visual.positional_embedding": "transformer.vision_model.embeddings.position_embedding.weight",
	"model.visual.proj":                 "transformer.visual_projection.weight",
	// HF's CLIP vision tower spells pre_layernorm without the "e".
	"transformer.vision_model.pre_layrnorm.weight": "transformer.vision_model.pre_layernorm.weight",
	"transformer.vision_model.pre_layrnorm.bias":   "transformer.vision_model.pre_layernorm.bias",
}

// open_clip residual blocks: the layer prefix and the names inside a block.
var openCLIPTowers = []pair{
	{"model.transformer.resblocks.", "transformer.text_model.encoder.layers."},
	{"model.visual.transformer.resblocks.", "transformer.vision_model.encoder.layers."},
}

var openCLIPBlock = map[string]string{
	"attn.in_proj_bias":    "self_attn.in_proj.bias",
	"attn.in_proj_weight":  "self_attn.in_proj.weight",
	"attn.out_proj.bias":   "self_attn.out_proj.bias",
	"attn.out_proj.weight": "self_attn.out_proj.weight",
	"ln_1.bias":            "layer_norm1.bias",
	"ln_1.weight":          "layer_norm1.weight",
	"ln_2.bias":            "layer_norm2.bias",
	"ln_2.weight":          "layer_norm2.weight",
	"mlp.c_fc.bias":        "mlp.fc1.bias",
	"mlp.c_fc.weight":      "mlp.fc1.weight",
	"mlp.c_proj.bias":      "mlp.fc2.bias",
	"mlp.c_proj.weight":    "mlp.fc2.weight",
}

// Projections whose HF and LDM names differ.
var clipProjections = substRules{rules: []pair{
	{"transformer.text_projection.weight", "transformer.text_model.text_projection"},
	{"model.text_projection.weight", "transformer.text_model.text_projection"},
	{"vision_model.visual_projection.weight", "visual_projection.weight"},
}, guards: []string{"_projection.weight"}}

// llama.cpp GGUF names of T5 -> HF T5 names.
var t5Rules = substRules{rules: []pair{
	{"enc.", "encoder."},
	{"blk.", "block."},
	{"output_norm.", "final_layer_norm."},
	{"attn_q.", "layer.0.SelfAttention.q."},
	{"attn_k.", "layer.0.SelfAttention.k."},
	{"attn_v.", "layer.0.SelfAttention.v."},
	{"attn_o.", "layer.0.SelfAttention.o."},
	{"attn_norm.", "layer.0.layer_norm."},
	{"ffn_norm.", "layer.1.layer_norm."},
	{"ffn_up.", "layer.1.DenseReluDense.wi_1."},
	{"ffn_down.", "layer.1.DenseReluDense.wo."},
	{"ffn_gate.", "layer.1.DenseReluDense.wi_0."},
	{"attn_rel_b.", "layer.0.SelfAttention.relative_attention_bias."},
	{"token_embd.", "shared."},
}}

// llama.cpp GGUF names of a decoder LLM -> HF names. Longer keys come before
// the keys they contain (ffn_gate_inp. before ffn_gate.).
var llmRules = substRules{rules: []pair{
	{"attn_sinks.weight", "self_attn.sinks"},
	{"token_embd.", "model.embed_tokens."},
	{"blk.", "model.layers."},
	{"attn_q.", "self_attn.q_proj."},
	{"attn_k.", "self_attn.k_proj."},
	{"attn_v.", "self_attn.v_proj."},
	{"attn_q_norm.", "self_attn.q_norm."},
	{"attn_k_norm.", "self_attn.k_norm."},
	{"attn_output.", "self_attn.o_proj."},
	{"attn_norm.", "input_layernorm."},
	{"attn_post_norm.", "post_attention_norm."},
	{"ffn_gate_inp.", "mlp.router."},
	{"ffn_gate_exps.", "mlp.experts.gate_proj."},
	{"ffn_up_exps.", "mlp.experts.up_proj."},
	{"ffn_down_exps.", "mlp.experts.down_proj."},
	{"ffn_down.", "mlp.down_proj."},
	{"ffn_gate.", "mlp.gate_proj."},
	{"ffn_up.", "mlp.up_proj."},
	{"ffn_post_norm.", "post_ffw_norm."},
	{"ffn_norm.", "post_attention_layernorm."},
	{"layer_output_scale.weight", "layer_scalar"},
	{"output_norm.", "model.norm."},
}}

// llama.cpp GGUF names of an LLM's vision tower (Qwen2.5-VL) -> HF names.
var llmVisionRules = substRules{rules: []pair{
	{"mm.", "merger.mlp."},
	{"v.post_ln.", "merger.ln_q."},
	{"v.patch_embd.weight", "patch_embed.proj.0.weight"},
	{"patch_embed.proj.0.weight.1", "patch_embed.proj.1.weight"},
	{"v.patch_embd.weight.1", "patch_embed.proj.1.weight"},
	{"v.blk.", "blocks."},
	{"attn_q.", "attn.q_proj."},
	{"attn_k.", "attn.k_proj."},
	{"attn_v.", "attn.v_proj."},
	{"attn_out.", "attn.proj."},
	{"ffn_down.", "mlp.down_proj."},
	{"ffn_gate.", "mlp.gate_proj."},
	{"ffn_up.", "mlp.up_proj."},
	{"ln1.", "norm1."},
	{"ln2.", "norm2."},
}}

// LLaDA2-MoE text encoder names -> the LLM layout.
var lladaRules = substRules{rules: []pair{
	{"model.language_model.word_embeddings.", "model.embed_tokens."},
	{"model.language_model.norm.", "model.norm."},
	{"model.language_model.lm_head.", "lm_head."},
	{"model.language_model.layers.", "model.layers."},
	{"attention.query_key_value.", "self_attn.query_key_value."},
	{"attention.dense.", "self_attn.o_proj."},
	{"attention.query_layernorm.", "self_attn.q_norm."},
	{"attention.key_layernorm.", "self_attn.k_norm."},
}, guards: []string{"model.language_model.", "attention."}}

// Stacked expert parameters that some checkpoints store without ".weight".
var bareExpertSuffixes = []string{"mlp.experts.gate_proj", "mlp.experts.up_proj", "mlp.experts.down_proj"}

// --- DiTs (diffusers -> original) ---

// dit collects whole-name renames of a DiT; weightBias adds both the
// .weight and .bias of a module, with an optional suffix after them (the
// ".1"/".2" of the q/k/v parts that sd.cpp fuses at load time).
type dit map[string]string

func (d dit) weightBias(from, to, suffix string) {
	d[from+".weight"] = to + ".weight" + suffix
	d[from+".bias"] = to + ".bias" + suffix
}

func fluxTable() map[string]string {
	const doubles, singles = 19, 38
	d := dit{}
	for _, emb := range []string{"time_embed", "time_text_embed"} { // time_embed: LongCat
		d.weightBias(emb+".timestep_embedder.linear_1", "time_in.in_layer", "")
		d.weightBias(emb+".timestep_embedder.linear_2", "time_in.out_layer", "")
	}
	d.weightBias("time_text_embed.text_embedder.linear_1", "vector_in.in_layer", "")
	d.weightBias("time_text_embed.text_embedder.linear_2", "vector_in.out_layer", "")
	d.weightBias("time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer", "")
	d.weightBias("time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer", "")
	d.weightBias("context_embedder", "txt_in", "")
	d.weightBias("x_embedder", "img_in", "")
	for i := 0; i < doubles; i++ {
		src, dst := "transformer_blocks."+itoa(i)+".", "double_blocks."+itoa(i)+"."
		d.weightBias(src+"norm1.linear", dst+"img_mod.lin", "")
		d.weightBias(src+"norm1_context.linear", dst+"txt_mod.lin", "")
		for k, part := range []string{"q", "k", "v"} {
			suffix := ""
			if k > 0 {
				suffix = "." + itoa(k)
			}
			d.weightBias(src+"attn.to_"+part, dst+"img_attn.qkv", suffix)
			d.weightBias(src+"attn.add_"+part+"_proj", dst+"txt_attn.qkv", suffix)
		}
		for _, s := range []string{"img", "txt"} {
			for _, qk := range []string{"query", "key"} {
				norm := dst + s + "_attn.norm." + qk + "_norm."
				// Comfy-Org's LongCat stores the RMSNorm scales as .weight.
				d[norm+"weight"] = norm + "scale"
			}
		}
		d[src+"attn.norm_q.weight"] = dst + "img_attn.norm.query_norm.scale"
		d[src+"attn.norm_k.weight"] = dst + "img_attn.norm.key_norm.scale"
		d[src+"attn.norm_added_q.weight"] = dst + "txt_attn.norm.query_norm.scale"
		d[src+"attn.norm_added_k.weight"] = dst + "txt_attn.norm.key_norm.scale"
		d.weightBias(src+"ff.net.0.proj", dst+"img_mlp.0", "")
		d.weightBias(src+"ff.net.2", dst+"img_mlp.2", "")
		d.weightBias(src+"ff_context.net.0.proj", dst+"txt_mlp.0", "")
		d.weightBias(src+"ff_context.net.2", dst+"txt_mlp.2", "")
		d.weightBias(src+"attn.to_out.0", dst+"img_attn.proj", "")
		d.weightBias(src+"attn.to_add_out", dst+"txt_attn.proj", "")
	}
	for i := 0; i < singles; i++ {
		src, dst := "single_transformer_blocks."+itoa(i)+".", "single_blocks."+itoa(i)+"."
		d.weightBias(src+"norm.linear", dst+"modulation.lin", "")
		d.weightBias(src+"attn.to_q", dst+"linear1", "")
		d.weightBias(src+"attn.to_k", dst+"linear1", ".1")
		d.weightBias(src+"attn.to_v", dst+"linear1", ".2")
		d.weightBias(src+"proj_mlp", dst+"linear1", ".3")
		d[src+"attn.norm_q.weight"] = dst + "norm.query_norm.scale"
		d[src+"attn.norm_k.weight"] = dst + "norm.key_norm.scale"
		d[dst+"norm.query_norm.weight"] = dst + "norm.query_norm.scale"
		d[dst+"norm.key_norm.weight"] = dst + "norm.key_norm.scale"
		d.weightBias(src+"proj_out", dst+"linear2", "")
	}
	d.weightBias("proj_out", "final_layer.linear", "")
	d.weightBias("norm_out.linear", "final_layer.adaLN_modulation.1", "")
	return d
}

func sd3Table() map[string]string {
	const layers = 38
	d := dit{}
	d.weightBias("time_text_embed.timestep_embedder.linear_1", "t_embedder.mlp.0", "")
	d.weightBias("time_text_embed.timestep_embedder.linear_2", "t_embedder.mlp.2", "")
	d.weightBias("time_text_embed.text_embedder.linear_1", "y_embedder.mlp.0", "")
	d.weightBias("time_text_embed.text_embedder.linear_2", "y_embedder.mlp.2", "")
	d["pos_embed.pos_embed"] = "pos_embed"
	d.weightBias("pos_embed.proj", "x_embedder.proj", "")
	for i := 0; i < layers; i++ {
		src, dst := "transformer_blocks."+itoa(i)+".", "joint_blocks."+itoa(i)+"."
		d.weightBias(src+"norm1.linear", dst+"x_block.adaLN_modulation.1", "")
		d.weightBias(src+"norm1_context.linear", dst+"context_block.adaLN_modulation.1", "")
		for _, attn := range []string{"attn", "attn2"} {
			for k, part := range []string{"q", "k", "v"} {
				suffix := ""
				if k > 0 {
					suffix = "." + itoa(k)
				}
				d.weightBias(src+attn+".to_"+part, dst+"x_block."+attn+".qkv", suffix)
				d.weightBias(src+attn+".add_"+part+"_proj", dst+"context_block."+attn+".qkv", suffix)
			}
			d.weightBias(src+attn+".to_out.0", dst+"x_block."+attn+".proj", "")
			d.weightBias(src+attn+".to_add_out", dst+"context_block."+attn+".proj", "")
			d[src+attn+".norm_q.weight"] = dst + "x_block." + attn + ".ln_q.weight"
			d[src+attn+".norm_k.weight"] = dst + "x_block." + attn + ".ln_k.weight"
		}
		d[src+"attn.norm_added_q.weight"] = dst + "context_block.attn.ln_q.weight"
		d[src+"attn.norm_added_k.weight"] = dst + "context_block.attn.ln_k.weight"
		d.weightBias(src+"ff.net.0.proj", dst+"x_block.mlp.fc1", "")
		d.weightBias(src+"ff.net.2", dst+"x_block.mlp.fc2", "")
		d.weightBias(src+"ff_context.net.0.proj", dst+"context_block.mlp.fc1", "")
		d.weightBias(src+"ff_context.net.2", dst+"context_block.mlp.fc2", "")
	}
	d.weightBias("proj_out", "final_layer.linear", "")
	d.weightBias("norm_out.linear", "final_layer.adaLN_modulation.1", "")
	return d
}

var (
	fluxDiT = mustPrefixTable(fluxTable())
	sd3DiT  = mustPrefixTable(sd3Table())
)

// --- Whole-name fix-ups applied to every name ---

// ComfyUI's scaled FP8 checkpoints call the scale "scale_weight".
var genericRules = substRules{rules: []pair{{".scale_weight", ".weight_scale"}}, guards: []string{".scale_weight"}}

// --- IP-Adapter ---

// ipAdapterSD15 maps an IP-Adapter attention index to the SD 1.x transformer
// block whose cross attention it extends.
var ipAdapterSD15 = map[int]string{
	1: "input_blocks.1.1.transformer_blocks.0", 3: "input_blocks.2.1.transformer_blocks.0",
	5: "input_blocks.4.1.transformer_blocks.0", 7: "input_blocks.5.1.transformer_blocks.0",
	9: "input_blocks.7.1.transformer_blocks.0", 11: "input_blocks.8.1.transformer_blocks.0",
	13: "output_blocks.3.1.transformer_blocks.0", 15: "output_blocks.4.1.transformer_blocks.0",
	17: "output_blocks.5.1.transformer_blocks.0", 19: "output_blocks.6.1.transformer_blocks.0",
	21: "output_blocks.7.1.transformer_blocks.0", 23: "output_blocks.8.1.transformer_blocks.0",
	25: "output_blocks.9.1.transformer_blocks.0", 27: "output_blocks.10.1.transformer_blocks.0",
	29: "output_blocks.11.1.transformer_blocks.0", 31: "middle_block.1.transformer_blocks.0",
}

// ipAdapterSDXL is the same for SDXL: odd indices walk the transformer
// blocks of each attention level in the order IP-Adapter numbers them.
var ipAdapterSDXL = func() map[int]string {
	m := map[int]string{}
	idx := 1
	for _, lv := range []struct {
		block string
		depth int
	}{
		{"input_blocks.4.1", 2}, {"input_blocks.5.1", 2}, {"input_blocks.7.1", 10}, {"input_blocks.8.1", 10},
		{"output_blocks.0.1", 10}, {"output_blocks.1.1", 10}, {"output_blocks.2.1", 10},
		{"output_blocks.3.1", 2}, {"output_blocks.4.1", 2}, {"output_blocks.5.1", 2}, {"middle_block.1", 10},
	} {
		for k := 0; k < lv.depth; k++ {
			m[idx] = lv.block + ".transformer_blocks." + itoa(k)
			idx += 2
		}
	}
	return m
}()

// --- LoRA ---

// Wrappers a LoRA name may carry after the "lora." sd.cpp's LoRA loader adds;
// the first that matches is stripped.
var loraWrappers = []string{"lora.lora.", "lora.lora_", "lora.lycoris_", "lora.lycoris.", "lora."}

// kohya-style names that use "_" as the separator.
var loraUnderscoreParts = []string{"unet_", "te_", "te1_", "te2_", "te3_", "vae_"}

// LoRA weight suffixes -> sd.cpp's ".weight.<kind>" form. sd.cpp tries them
// in std::map (byte) order; none is a suffix of another, so the order only
// documents.
var loraSuffixes = prefixList{ // from/to are suffixes here
	{".alpha", ".weight.alpha"},
	{".diff", ".weight.diff"},
	{".diff_b", ".bias.diff"},
	{".hada_t1", ".weight.hada_t1"},
	{".hada_t2", ".weight.hada_t2"},
	{".hada_w1_a", ".weight.hada_w1_a"},
	{".hada_w1_b", ".weight.hada_w1_b"},
	{".hada_w2_a", ".weight.hada_w2_a"},
	{".hada_w2_b", ".weight.hada_w2_b"},
	{".lokr_w1", ".weight.lokr_w1"},
	{".lokr_w1_a", ".weight.lokr_w1_a"},
	{".lokr_w1_b", ".weight.lokr_w1_b"},
	{".lokr_w2", ".weight.lokr_w2"},
	{".lokr_w2_a", ".weight.lokr_w2_a"},
	{".lokr_w2_b", ".weight.lokr_w2_b"},
	{".lora.down.weight", ".weight.lora_down"},
	{".lora.mid.weight", ".weight.lora_mid"},
	{".lora.up.weight", ".weight.lora_up"},
	{".lora_A", ".weight.lora_down"},
	{".lora_A.default.weight", ".weight.lora_down"},
	{".lora_A.weight", ".weight.lora_down"},
	{".lora_B", ".weight.lora_up"},
	{".lora_B.default.weight", ".weight.lora_up"},
	{".lora_B.weight", ".weight.lora_up"},
	{".lora_down.weight", ".weight.lora_down"},
	{".lora_linear", ".weight.alpha"},
	{".lora_mid.weight", ".weight.lora_mid"},
	{".lora_up.weight", ".weight.lora_up"},
	{".scale", ".weight.scale"},
	{"_lora.down.weight", ".weight.lora_down"},
	{"_lora.mid.weight", ".weight.lora_mid"},
	{"_lora.up.weight", ".weight.lora_up"},
}

// DiT LoRA names without a model prefix.
var loraDiTHeads = []string{"transformer_blocks", "single_transformer_blocks"}

// Bare diffusers UNet heads a LoRA may use without any prefix.
var loraUNetHeads = []string{"down_blocks.", "up_blocks.", "mid_block.", "conv_in.", "conv_out.", "time_embedding.", "conv_norm_out."}

// Words whose underscores survive when a kohya name's "_" separators become
// "."; every other underscore is a separator.
var loraKeepWords = []string{
	"self_attn", "out_proj", "q_proj", "k_proj", "v_proj", "to_k", "to_q", "to_v", "to_out",
	"text_model", "down_blocks", "mid_block", "up_block", "proj_in", "proj_out",
	"transformer_blocks", "single_transformer_blocks", "single_blocks", "diffusion_model",
	"cond_stage_model", "first_stage_model", "conv_in", "conv_out", "lora_down", "lora_mid",
	"lora_up", "diff_b", "hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2",
	".lokr_w1", ".lokr_w1_a", ".lokr_w1_b", ".lokr_w2", ".lokr_w2_a", ".lokr_w2_b",
	"time_emb_proj", "conv_shortcut", "time_embedding", "conv_norm_out", "double_blocks",
	"txt_attn", "img_attn", "input_blocks", "output_blocks", "middle_block", "skip_connection",
	"emb_layers", "in_layers", "out_layers", "add_q_proj", "add_k_proj", "add_v_proj",
	"add_out_proj", "ff_context", "norm_added_q", "norm_added_v", "to_add_out", "txt_mod",
	"img_mod", "txt_mlp", "img_mlp", "proj_mlp", "wi_0", "wi_1", "norm1_context", "x_embedder",
	"cross_attn", "output_proj", "token_refiner",
}

// substLists are all rename lists, for their set-up and checks.
var substLists = map[string]*substRules{
	"unet resnet": &unetResnet, "unet tail": &unetTail, "sd1 blocks": &sd1UNet.blocks,
	"sdxl blocks": &sdxlUNet.blocks, "vae base": &vaeBase, "vae blocks": &vaeBlockRules,
	"vae old attention": &vaeAttnOld, "vae new attention": &vaeAttnNew,
	"clip projections": &clipProjections, "t5": &t5Rules, "llm": &llmRules,
	"llm vision": &llmVisionRules, "llada": &lladaRules, "generic": &genericRules,
	"wan vae shared": &wanVAEShared, "wan vae residual": &wanVAEResidual,
	"hunyuan generic": &hunyuanGeneric, "krea2": &krea2Names,
	"qwen3-vl deepstack": &qwen3VLDeepstack, "qwen3-vl vision": &qwen3VLVision,
}

func init() {
	for _, r := range substLists {
		r.prepare()
	}
}

// --- Wan VAE (diffusers -> original), also Qwen-Image's and Anima's ---

// Renames inside the encoder and decoder, applied first.
var wanVAEShared = substRules{rules: []pair{
	{".conv_in.", ".conv1."},
	{".norm_out.", ".head.0."},
	{".conv_out.", ".head.2."},
	{".mid_block.attentions.0.", ".middle.1."},
	{".mid_block.resnets.0.", ".middle.0.residual."},
	{".mid_block.resnets.1.", ".middle.2.residual."},
}}

// The flat module lists of the original encoder and decoder; a shortcut
// comes before the block that holds it.
var wanVAEPrefixes = func() prefixList {
	l := prefixList{{"quant_conv.", "conv1."}, {"post_quant_conv.", "conv2."}}
	// Decoder: per level three resnets and (but the last) an upsampler;
	// level 1's first resnet has a shortcut.
	n := 0
	for lv := 0; lv < 4; lv++ {
		up := "decoder.up_blocks." + itoa(lv) + "."
		for j := 0; j < 3; j++ {
			if lv == 1 && j == 0 {
				l = append(l, pair{up + "resnets.0.conv_shortcut.", "decoder.upsamples." + itoa(n) + ".shortcut."})
			}
			l = append(l, pair{up + "resnets." + itoa(j) + ".", "decoder.upsamples." + itoa(n) + ".residual."})
			n++
		}
		if lv < 3 {
			l = append(l, pair{up + "upsamplers.0.", "decoder.upsamples." + itoa(n) + "."})
			n++
		}
	}
	// Encoder: eleven modules; 2, 5 and 8 downsample, 3 and 6 have a
	// shortcut.
	for i := 0; i <= 10; i++ {
		from, to := "encoder.down_blocks."+itoa(i)+".", "encoder.downsamples."+itoa(i)+"."
		switch i {
		case 2, 5, 8:
			l = append(l, pair{from, to})
			continue
		case 3, 6:
			l = append(l, pair{from + "conv_shortcut.", to + "shortcut."})
		}
		l = append(l, pair{from, to + "residual."})
	}
	return l
}()

// Inside a residual block, applied to names that contain ".residual.".
var wanVAEResidual = substRules{rules: []pair{
	{".norm1.", ".0."},
	{".conv1.", ".2."},
	{".norm2.", ".3."},
	{".conv2.", ".6."},
}}

// --- Z-Image (diffusers -> original Lumina 2 layout) ---

func zImageTable() map[string]string {
	d := dit{
		"all_x_embedder.2-1.":  "x_embedder.",
		"all_final_layer.2-1.": "final_layer.",
	}
	for _, stack := range []struct {
		prefix string
		n      int
	}{{"noise_refiner.", 2}, {"context_refiner.", 2}, {"layers.", 30}} {
		for i := 0; i < stack.n; i++ {
			a := stack.prefix + itoa(i) + ".attention."
			d[a+"norm_q."] = a + "q_norm."
			d[a+"norm_k."] = a + "k_norm."
			d[a+"to_out.0."] = a + "out."
			d.weightBias(a+"to_q", a+"qkv", "")
			d.weightBias(a+"to_k", a+"qkv", ".1")
			d.weightBias(a+"to_v", a+"qkv", ".2")
		}
	}
	return d
}

var zImageDiT = mustPrefixTable(zImageTable())

// Anima's diffusion model lives under "net.".
const animaPrefix = "net."

// --- PhotoMaker ---

var photoMakerNames = map[string]string{
	"pmid.vision_model.visual_projection.weight": "pmid.visual_projection.weight",
}

// PhotoMaker v2's perceiver stores its feed-forward layers by index.
var photoMakerV2Names = func() map[string]string {
	const q = "pmid.qformer_perceiver."
	m := map[string]string{
		q + "token_proj.0.bias":   q + "token_proj.fc1.bias",
		q + "token_proj.2.bias":   q + "token_proj.fc2.bias",
		q + "token_proj.0.weight": q + "token_proj.fc1.weight",
		q + "token_proj.2.weight": q + "token_proj.fc2.weight",
	}
	for i := 0; i < 4; i++ {
		l := q + "perceiver_resampler.layers." + itoa(i) + ".1."
		m[l+"1.weight"] = l + "1.fc1.weight"
		m[l+"3.weight"] = l + "1.fc2.weight"
	}
	return m
}()

// --- Hunyuan Video (original names -> sd.cpp's Flux-style names) ---

func hunyuanTable() map[string]string {
	const doubles = 54
	d := dit{}
	for i := 0; i < doubles; i++ {
		b := "double_blocks." + itoa(i) + "."
		for _, s := range []string{"img", "txt"} {
			d[b+s+"_mod.linear"] = b + s + "_mod.lin"
			d[b+s+"_attn_qkv"] = b + s + "_attn.qkv"
			d[b+s+"_attn_q_norm.weight"] = b + s + "_attn.norm.query_norm.scale"
			d[b+s+"_attn_k_norm.weight"] = b + s + "_attn.norm.key_norm.scale"
			d[b+s+"_mlp.fc1"] = b + s + "_mlp.0"
			d[b+s+"_mlp.fc2"] = b + s + "_mlp.2"
			d[b+s+"_attn_proj"] = b + s + "_attn.proj"
		}
	}
	for _, mlp := range []string{"time_in", "time_r_in", "vector_in", "guidance_in", "txt_in.t_embedder"} {
		d[mlp+".mlp.0"] = mlp + ".in_layer"
		d[mlp+".mlp.2"] = mlp + ".out_layer"
	}
	d["txt_in.c_embedder.linear_1"] = "txt_in.c_embedder.in_layer"
	d["txt_in.c_embedder.linear_2"] = "txt_in.c_embedder.out_layer"
	return d
}

var hunyuanDiT = mustPrefixTable(hunyuanTable())

// Renames anywhere in a Hunyuan name, after the table (the single blocks and
// the token refiner use them).
var hunyuanGeneric = substRules{rules: []pair{
	{"_attn_qkv.", "_attn.qkv."},
	{"_attn_proj.", "_attn.proj."},
	{"mlp.fc1.", "mlp.0."},
	{"mlp.fc2.", "mlp.2."},
	{".modulation.linear.", ".modulation.lin."},
}}

// --- Krea 2 (diffusers -> original) ---

var krea2Prefixes = prefixList{
	{"img_in.", "first."},
	{"time_embed.linear_1.", "tmlp.0."},
	{"time_embed.linear_2.", "tmlp.2."},
	{"time_mod_proj.", "tproj.1."},
	{"txt_in.linear_1.", "txtmlp.1."},
	{"txt_in.linear_2.", "txtmlp.3."},
	{"text_fusion.", "txtfusion."},
	{"transformer_blocks.", "blocks."},
	{"final_layer.", "last."},
}

var krea2Names = substRules{rules: []pair{
	{"attn.to_out.0.", "attn.wo."},
	{"attn.to_out.", "attn.wo."},
	{"attn.to_gate.", "attn.gate."},
	{"attn.to_q.", "attn.wq."},
	{"attn.to_k.", "attn.wk."},
	{"attn.to_v.", "attn.wv."},
	{"ff.gate.", "mlp.gate."},
	{"ff.up.", "mlp.up."},
	{"ff.down.", "mlp.down."},
	{"txt_in.norm.", "txtmlp.0."},
	{"last.norm.weight", "last.norm.scale"},
	{"last.modulation.weight", "last.modulation.lin"},
}}

// --- Qwen3-VL vision tower (llama.cpp GGUF -> HF), for Krea 2 ---

const (
	llmVisualHF = "text_encoders.llm.model.visual."
	llmVisual   = "text_encoders.llm.visual."
)

var qwen3VLDeepstack = substRules{rules: []pair{
	{"v.deepstack_merger_list.", "deepstack_merger_list."},
	{"v.deepstack.5.", "deepstack_merger_list.0."},
	{"v.deepstack.8.", "deepstack_merger_list.0."},
	{"v.deepstack.11.", "deepstack_merger_list.1."},
	{"v.deepstack.16.", "deepstack_merger_list.1."},
	{"v.deepstack.17.", "deepstack_merger_list.2."},
	{"v.deepstack.24.", "deepstack_merger_list.2."},
	{"fc1.", "linear_fc1."},
	{"fc2.", "linear_fc2."},
	{"ffn_up.", "linear_fc1."},
	{"ffn_down.", "linear_fc2."},
	{"ffn_norm.", "norm."},
}}

var qwen3VLVision = substRules{rules: []pair{
	{"mm.0.", "merger.linear_fc1."},
	{"mm.2.", "merger.linear_fc2."},
	{"v.post_ln.", "merger.norm."},
	{"v.position_embd.weight", "pos_embed.weight"},
	{"v.patch_embd.weight.1", "patch_embed.proj.1.weight"},
	{"v.patch_embd.weight", "patch_embed.proj.0.weight"},
	{"v.patch_embd.bias", "patch_embed.bias"},
	{"v.blk.", "blocks."},
	{"attn_qkv.", "attn.qkv."},
	{"attn_out.", "attn.proj."},
	{"ffn_up.", "mlp.linear_fc1."},
	{"ffn_down.", "mlp.linear_fc2."},
	{"ln1.", "norm1."},
	{"ln2.", "norm2."},
}}

package lora

// The naming knowledge of adapters, as data. An adapter key names its
// module in some scheme; resolving it means finding the base tensor whose
// name converts (with names.Convert, sd.cpp's conversion) to the same
// canonical name. The tables below say how to turn an adapter's module
// name into names a model could have.

// head is a module-name prefix that says which part of the model a module
// belongs to. comp is the prefix sd.cpp's loader would give a tensor of that
// part (names.Convert maps it on); flat marks kohya-style names whose "."
// became "_".
type head struct {
	prefix string
	comp   string
	flat   bool
}

// heads are tried in order; the first that starts the module name wins.
// kohya writes lora_unet_ (the denoiser, also Flux's and Wan's transformer)
// and lora_te_/lora_te1_/lora_te2_/lora_te3_ (the text encoders: SD's CLIP,
// SDXL's CLIP-L and CLIP-G, Flux's and SD3's T5); OneTrainer writes
// lora_transformer_ with diffusers names, SimpleTuner lycoris_ with bare
// diffusers names. Dotted names carry diffusers or PEFT prefixes
// (text_encoder_2. is SDXL's CLIP-G), ComfyUI's (diffusion_model.,
// text_encoders.clip_l.) or PEFT's wrapper base_model.model.
var heads = []head{
	{"lora_unet_", "unet.", true},
	{"lora_te1_", "te1.", true},
	{"lora_te2_", "te2.", true},
	{"lora_te3_", "te3.", true},
	{"lora_te_", "te.", true},
	{"lora_transformer_", "transformer.", true},
	{"lycoris_", "diffusion_model.", true},
	{"base_model.model.", "", false},
	{"text_encoder_2.", "te2.", false},
	{"text_encoder_3.", "te3.", false},
	{"text_encoder.", "te1.", false},
	{"text_encoders.clip_l.", "clip_l.", false},
	{"text_encoders.clip_g.", "clip_g.", false},
	// sd.cpp's LoRA names carry its loader's "lora." before a converted name.
	{"lora.", "", false},
}

// bareComps are tried for a dotted module name with no head: as it is
// (already a full name) and as a name inside the diffusion model, which is
// how ComfyUI and PEFT store denoiser-only adapters ("double_blocks.0...",
// "transformer_blocks.0...", "down_blocks.0...").
var bareComps = []string{"", "diffusion_model."}

// flatNoise are prefixes of a flattened name left by converters that
// flattened an already prefixed name ("lora_unet__diffusion_model_blocks_0_..."
// from some Wan trainers); they are dropped before the flat lookup.
var flatNoise = []string{"_", "diffusion_model_", "model_diffusion_model_", "transformer_"}

// rename is a substring rename applied to a dotted candidate name (with a
// trailing "." so that whole module names can be matched), each rule once,
// to its first occurrence, in order.
type rename struct{ from, to string }

// renameSets are alternative spellings of modules that names.Convert (like
// sd.cpp) does not map: each set gives one more candidate.
var renameSets = [][]rename{
	// diffusers attention processors: "attn1.processor.to_q".
	{{".processor.", "."}},
	// diffusers' WanTransformer3DModel names -> the original Wan names
	// (diffusers' own convert_wan_to_diffusers mapping, read backwards).
	{
		{".attn1.to_q", ".self_attn.q"}, {".attn1.to_k", ".self_attn.k"}, {".attn1.to_v", ".self_attn.v"},
		{".attn1.to_out.0", ".self_attn.o"}, {".attn1.norm_q", ".self_attn.norm_q"}, {".attn1.norm_k", ".self_attn.norm_k"},
		{".attn2.to_q", ".cross_attn.q"}, {".attn2.to_k", ".cross_attn.k"}, {".attn2.to_v", ".cross_attn.v"},
		{".attn2.to_out.0", ".cross_attn.o"}, {".attn2.add_k_proj", ".cross_attn.k_img"},
		{".attn2.add_v_proj", ".cross_attn.v_img"}, {".attn2.norm_added_k", ".cross_attn.norm_k_img"},
		{".ffn.net.0.proj", ".ffn.0"}, {".ffn.net.2", ".ffn.2"},
		// diffusers' norm2 is the original norm3 and the other way round.
		{".norm2.", ".norm#."}, {".norm3.", ".norm2."}, {".norm#.", ".norm3."},
		{"condition_embedder.text_embedder.linear_1", "text_embedding.0"},
		{"condition_embedder.text_embedder.linear_2", "text_embedding.2"},
		{"condition_embedder.time_embedder.linear_1", "time_embedding.0"},
		{"condition_embedder.time_embedder.linear_2", "time_embedding.2"},
		{"condition_embedder.time_proj", "time_projection.1"},
		{"proj_out.", "head.head."},
	},
	// XLabs' Flux LoRAs: processor LoRAs on the double blocks' fused qkv and
	// output projections (lora1 for the image stream, lora2 for text).
	{
		{".processor.qkv_lora1", ".img_attn.qkv"}, {".processor.qkv_lora2", ".txt_attn.qkv"},
		{".processor.proj_lora1", ".img_attn.proj"}, {".processor.proj_lora2", ".txt_attn.proj"},
	},
}

// alias is a canonical (sd.cpp) name that a base may hold fused: a name
// ending in from is part part of the tensor ending in to instead. sd.cpp
// keeps SDXL's second text encoder's attention in_proj fused (open_clip's
// layout) and remaps LoRA q/k/v names onto it.
type alias struct {
	from, to string
	part     int
}

var aliases = []alias{
	{"self_attn.q_proj.weight", "self_attn.in_proj.weight", 0},
	{"self_attn.k_proj.weight", "self_attn.in_proj.weight", 1},
	{"self_attn.v_proj.weight", "self_attn.in_proj.weight", 2},
	{"self_attn.q_proj.bias", "self_attn.in_proj.bias", 0},
	{"self_attn.k_proj.bias", "self_attn.in_proj.bias", 1},
	{"self_attn.v_proj.bias", "self_attn.in_proj.bias", 2},
}

// baseAliases fix canonical base names that differ from what adapters of
// the same tensor convert to: a diffusers folder's second text encoder is
// loaded under "te.1.", which sd.cpp's conversion turns into
// "cond_stage_model.transformer.1." while every adapter's CLIP-G names
// convert to "cond_stage_model.1.transformer.".
var baseAliases = []rename{
	{"cond_stage_model.transformer.1.", "cond_stage_model.1.transformer."},
}

// maxEnumerate caps the number of dot placements tried for one flattened
// name (2^12: kohya names of block modules have up to 11 underscores after the head).
const maxEnumerate = 1 << 12

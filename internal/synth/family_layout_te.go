package synth

// Text-encoder and VAE layouts as their standalone files name them. The
// widths that detection reads (CLIP's and T5's model width, the LLMs'
// vocabularies) are real; the other dims are small.

// layoutCLIP are a Hugging Face CLIPTextModel's tensors; proj adds
// CLIP-G's text_projection.
func layoutCLIP(proj bool) []string {
	p := "text_model.encoder.layers.{i}."
	l := joinLines(
		[]string{"text_model.embeddings.token_embedding.weight V H", "text_model.embeddings.position_embedding.weight 77 H"},
		layoutLinear(p+"self_attn.q_proj", "H", "H"), layoutLinear(p+"self_attn.k_proj", "H", "H"),
		layoutLinear(p+"self_attn.v_proj", "H", "H"), layoutLinear(p+"self_attn.out_proj", "H", "H"),
		[]string{p + "layer_norm1.weight H", p + "layer_norm1.bias H", p + "layer_norm2.weight H", p + "layer_norm2.bias H"},
		layoutLinear(p+"mlp.fc1", "F", "H"), layoutLinear(p+"mlp.fc2", "H", "F"),
		[]string{"text_model.final_layer_norm.weight H", "text_model.final_layer_norm.bias H"},
	)
	if proj {
		l = append(l, "text_projection.weight H H")
	}
	return l
}

// layoutT5 are a T5EncoderModel's tensors; the model width is real.
var layoutT5 = []string{
	"shared.weight V 4096",
	"encoder.block.{i}.layer.0.SelfAttention.q.weight I 4096", "encoder.block.{i}.layer.0.SelfAttention.k.weight I 4096",
	"encoder.block.{i}.layer.0.SelfAttention.v.weight I 4096", "encoder.block.{i}.layer.0.SelfAttention.o.weight 4096 I",
	"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight 32 64",
	"encoder.block.{i}.layer.0.layer_norm.weight 4096",
	"encoder.block.{i}.layer.1.DenseReluDense.wi_0.weight F 4096", "encoder.block.{i}.layer.1.DenseReluDense.wi_1.weight F 4096",
	"encoder.block.{i}.layer.1.DenseReluDense.wo.weight 4096 F", "encoder.block.{i}.layer.1.layer_norm.weight 4096",
	"encoder.final_layer_norm.weight 4096",
}

// layoutLLM are a Hugging Face decoder's tensors (Qwen, Llama, Mistral,
// Gemma naming); qNorm adds Qwen3's and Gemma 3's q/k norms, gemma its
// extra feed-forward norms.
func layoutLLM(qNorm, gemma bool) []string {
	p := "model.layers.{i}."
	l := joinLines(
		[]string{"model.embed_tokens.weight V H"},
		[]string{p + "self_attn.q_proj.weight H H", p + "self_attn.k_proj.weight K H", p + "self_attn.v_proj.weight K H", p + "self_attn.o_proj.weight H H"},
		[]string{p + "mlp.gate_proj.weight F H", p + "mlp.up_proj.weight F H", p + "mlp.down_proj.weight H F"},
		[]string{p + "input_layernorm.weight H", p + "post_attention_layernorm.weight H", "model.norm.weight H"},
	)
	if qNorm {
		l = append(l, p+"self_attn.q_norm.weight 128", p+"self_attn.k_norm.weight 128")
	}
	if gemma {
		l = append(l, p+"pre_feedforward_layernorm.weight H", p+"post_feedforward_layernorm.weight H")
	}
	return l
}

func init() {
	clip := func(h int) map[string]int { return map[string]int{"V": 64, "H": h, "F": 256} }
	addLayout("layout-clip-l", layout{doc: "CLIP-L text encoder (Hugging Face names, 768 wide)", dims: clip(768), blocks: 1, lines: layoutCLIP(false)})
	addLayout("layout-clip-g", layout{doc: "CLIP-G text encoder (Hugging Face names, 1280 wide, text_projection)", dims: clip(1280), blocks: 1, lines: layoutCLIP(true)})
	addLayout("layout-t5xxl", layout{doc: "T5-XXL encoder (T5EncoderModel names, 4096 wide)", dims: map[string]int{"V": 32128, "I": 64, "F": 64}, blocks: 2, lines: layoutT5})
	addLayout("layout-umt5xxl", layout{doc: "UMT5-XXL encoder (Wan's; its 256384-token vocabulary tells it from T5)", dims: map[string]int{"V": 256384, "I": 64, "F": 64}, blocks: 2, lines: layoutT5})
	llm := func(v, h int) map[string]int { return map[string]int{"V": v, "H": h, "K": 64, "F": 256} }
	addLayout("layout-qwen2.5-vl", layout{doc: "Qwen2.5-VL 7B language model (152064 tokens)", dims: llm(152064, 64), blocks: 2, lines: layoutLLM(false, false)})
	addLayout("layout-qwen3", layout{doc: "Qwen3 4B (151936 tokens, q/k norms)", dims: llm(151936, 64), blocks: 2, lines: layoutLLM(true, false)})
	addLayout("layout-mistral", layout{doc: "Mistral Small 3 (131072 tokens)", dims: llm(131072, 64), blocks: 2, lines: layoutLLM(false, false)})
	addLayout("layout-gemma3", layout{doc: "Gemma 3 (262208 tokens, q/k norms, pre/post feed-forward norms)", dims: llm(262208, 64), blocks: 2, lines: layoutLLM(true, true)})
	addLayout("layout-llama3", layout{doc: "Llama 3.1 8B (128256 tokens)", dims: llm(128256, 64), blocks: 2, lines: layoutLLM(false, false)})

	// VAEs.
	ldmVAE := func(z string) []string {
		return []string{
			"encoder.conv_in.weight C 3 3 3", "encoder.down.0.block.0.conv1.weight C C 3 3", "encoder.mid.block_1.conv1.weight C C 3 3",
			"encoder.conv_out.weight 2" + z + " C 3 3", "decoder.conv_in.weight C " + z + " 3 3",
			"decoder.mid.block_1.conv1.weight C C 3 3", "decoder.mid.attn_1.q.weight C C 1 1", "decoder.up.0.block.0.conv1.weight C C 3 3",
			"decoder.norm_out.weight C", "decoder.conv_out.weight 3 C 3 3",
		}
	}
	addLayout("layout-vae-sd", layout{doc: "SD / SDXL VAE (4 latent channels)", dims: map[string]int{"C": 32, "Z": 4}, lines: ldmVAE("Z")})
	addLayout("layout-vae-flux", layout{doc: "Flux / SD3 VAE (16 latent channels)", dims: map[string]int{"C": 32, "Z": 16}, lines: ldmVAE("Z")})
	wanVAE := []string{
		"encoder.conv1.weight C 3 3 3 3", "encoder.downsamples.0.residual.0.gamma C 1 1 1", "encoder.downsamples.0.residual.2.weight C C 3 3 3",
		"encoder.head.2.weight 2Z C 3 3 3", "conv1.weight 2Z 2Z 1 1 1", "conv2.weight Z Z 1 1 1",
		"decoder.conv1.weight C Z 3 3 3", "decoder.upsamples.0.residual.2.weight C C 3 3 3", "decoder.head.2.weight 3 C 3 3 3",
	}
	addLayout("layout-vae-wan2.1", layout{doc: "Wan 2.1 VAE (16 latent channels; also Qwen-Image's)", dims: map[string]int{"C": 32, "Z": 16}, lines: wanVAE})
	addLayout("layout-vae-wan2.2", layout{doc: "Wan 2.2 VAE (48 latent channels)", dims: map[string]int{"C": 32, "Z": 48}, lines: wanVAE})
	addLayout("layout-vae-ltx", layout{doc: "LTX-Video VAE", dims: map[string]int{"C": 32}, lines: []string{
		"per_channel_statistics.mean-of-means 128", "per_channel_statistics.std-of-means 128",
		"encoder.conv_in.conv.weight C 48 3 3 3", "decoder.conv_in.conv.weight C 128 3 3 3",
		"decoder.up_blocks.0.res_blocks.0.conv1.conv.weight C C 3 3 3", "decoder.conv_out.conv.weight 48 C 3 3 3",
	}})
}

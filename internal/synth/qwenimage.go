package synth

import (
	"io"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/text"
)

// QwenImage is a Qwen-Image model given by its exact widths and depths:
// the MMDiT under diffusers' names (transformer_blocks.N.), Qwen2.5-VL's
// text model under Hugging Face's names (model.layers.N., q/k/v biases),
// and Wan 2.1's causal 3-D VAE (its original names), with the same
// deterministic values as Spec. It writes the layout people download (one
// file per component, for --diffusion-model, --llm and --vae) or one file
// with ComfyUI's prefixes. sd.cpp detects the DiT's depth from the
// weights but fixes its widths (3072, 24 heads of 128) and Qwen2.5-VL 7B's
// heads, so QwenImageParity keeps those and cuts the depths.
type QwenImage struct {
	// Hidden and Heads shape the DiT (heads Hidden/Heads wide, MLP 4·Hidden).
	Hidden, Heads int
	// Layers is the number of dual-stream blocks.
	Layers int
	// Axes, when not "", is written as the DiT's RoPE axes (sdtool's
	// metadata key, for heads narrower than Qwen-Image's 128).
	Axes string
	// LLM shapes the Qwen2.5-VL text model (its Hidden is the DiT's context width).
	LLM Qwen25VLShape
	// Tokenizer embeds a small byte-level BPE vocabulary (every byte, a
	// few merges and the chat template's control tokens) in the text
	// encoder's GGUF metadata and sizes the embedding to it.
	Tokenizer bool
	// VAEDim is the Wan VAE's outermost width (Wan 2.1: 96; the decoder's
	// widest level is 4·VAEDim).
	VAEDim int
	// Seed selects the values.
	Seed int64
	// Type is the float type of every tensor (F16 or F32); Quant, when not
	// 0, that of the DiT's and the text encoder's 2-D weights whose rows
	// are whole blocks.
	Type, Quant formats.DType
	// Width, Height and Steps are the generate defaults written in the metadata.
	Width, Height, Steps int
}

// Qwen25VLShape is a Qwen2.5-VL text model's widths and depth.
type Qwen25VLShape struct {
	// Hidden is the residual width, FF the SwiGLU width, Layers the depth.
	Hidden, FF, Layers int
	// Heads and KVHeads are the query and key/value heads of HeadDim.
	Heads, KVHeads, HeadDim int
	// Vocab is the token embedding's rows (Tokenizer sets it to the small vocabulary's).
	Vocab int
}

// Qwen25VL7B is Qwen2.5-VL 7B's text model (28 layers), Qwen-Image's text encoder.
var Qwen25VL7B = Qwen25VLShape{Hidden: 3584, FF: 18944, Layers: 28, Heads: 28, KVHeads: 4, HeadDim: 128, Vocab: 152064}

// QwenImageParity is the Qwen-Image model of the sd-cli comparisons: the
// DiT at full width (3072, 24 heads of 128) with two blocks, Qwen2.5-VL 7B
// at full width with two layers (prompts tokenized by the real Qwen
// tokenizer on both sides), Wan 2.1's VAE at full width; matrices q8_0,
// the rest f16.
var QwenImageParity = QwenImage{
	Hidden: 3072, Heads: 24, Layers: 2,
	LLM:    func() Qwen25VLShape { s := Qwen25VL7B; s.Layers = 2; return s }(),
	VAEDim: 96, Seed: 11, Type: formats.F16, Quant: formats.Q8_0, Width: 128, Height: 128, Steps: 4,
}

// TinyQwenImage is testdata/tiny-qwen-image.gguf: a 128-wide DiT (one
// 128-wide head) with one block, a 64-wide two-layer Qwen2.5-VL text model
// (two heads of 32, one key/value head) with the small tokenizer embedded,
// and a Wan VAE 8 wide; matrices q8_0, the rest f16, 64x64 images in 2
// steps by default (under 3 MB).
var TinyQwenImage = QwenImage{
	Hidden: 128, Heads: 1, Layers: 1,
	LLM:       Qwen25VLShape{Hidden: 64, FF: 128, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 32},
	Tokenizer: true, VAEDim: 8, Seed: 12, Type: formats.F16, Quant: formats.Q8_0, Width: 64, Height: 64, Steps: 2,
}

// QwenImageParts are the component flags QwenImage writes, in sd-cli's order.
var QwenImageParts = []string{"diffusion-model", "llm", "vae"}

// qwenImageComfyPrefix is each component's prefix in a single file
// (ComfyUI's DiT and VAE prefixes; the text encoder where sd-cli's
// convert puts it).
var qwenImageComfyPrefix = map[string]string{
	"diffusion-model": "model.diffusion_model.",
	"llm":             "text_encoders.llm.",
	"vae":             "vae.",
}

// buildDiT adds the DiT's tensors (diffusers names).
func (c QwenImage) buildDiT(b *builder) {
	h, d := c.Hidden, c.Hidden/c.Heads
	b.linear("img_in", h, 64, true)
	b.add("txt_norm.weight", InitOne, c.LLM.Hidden)
	b.linear("txt_in", h, c.LLM.Hidden, true)
	b.linear("time_text_embed.timestep_embedder.linear_1", h, 256, true)
	b.linear("time_text_embed.timestep_embedder.linear_2", h, h, true)
	for i := 0; i < c.Layers; i++ {
		p := "transformer_blocks." + itoa(i) + "."
		for _, st := range []string{"img", "txt"} {
			b.linear(p+st+"_mod.1", 6*h, h, true)
			b.linear(p+st+"_mlp.net.0.proj", 4*h, h, true)
			b.linear(p+st+"_mlp.net.2", h, 4*h, true)
		}
		for _, n := range []string{"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"} {
			b.linear(p+"attn."+n, h, h, true)
		}
		for _, n := range []string{"norm_q", "norm_k", "norm_added_q", "norm_added_k"} {
			b.add(p+"attn."+n+".weight", InitOne, d)
		}
	}
	b.linear("norm_out.linear", 2*h, h, true)
	b.linear("proj_out", 64, h, true)
}

// buildLLM adds the Qwen2.5-VL text model's tensors (Hugging Face names).
func (c QwenImage) buildLLM(b *builder) {
	s := c.LLM
	b.add("model.embed_tokens.weight", InitWeight, c.vocab(), s.Hidden)
	for i := 0; i < s.Layers; i++ {
		p := "model.layers." + itoa(i) + "."
		b.add(p+"input_layernorm.weight", InitOne, s.Hidden)
		b.linear(p+"self_attn.q_proj", s.Heads*s.HeadDim, s.Hidden, true)
		b.linear(p+"self_attn.k_proj", s.KVHeads*s.HeadDim, s.Hidden, true)
		b.linear(p+"self_attn.v_proj", s.KVHeads*s.HeadDim, s.Hidden, true)
		b.linear(p+"self_attn.o_proj", s.Hidden, s.Heads*s.HeadDim, false)
		b.add(p+"post_attention_layernorm.weight", InitOne, s.Hidden)
		b.linear(p+"mlp.gate_proj", s.FF, s.Hidden, false)
		b.linear(p+"mlp.up_proj", s.FF, s.Hidden, false)
		b.linear(p+"mlp.down_proj", s.Hidden, s.FF, false)
	}
	b.add("model.norm.weight", InitOne, s.Hidden)
}

// wanVAE21 adds Wan 2.1's VAE (original names, 5-D Conv3d kernels) of
// outer width dim: the encoder (2 residual blocks per level, spatial
// downsampling at the first three, temporal at the last two), the latent
// projections, and the decoder (3 per level, the time upsampling at the
// first two). The decoder's upsampling convolutions halve the width.
func wanVAE21(b *builder, dim, z int) {
	conv := func(p string, out, in, kt, k int) {
		if kt == 0 {
			b.add(p+".weight", InitWeight, out, in, k, k)
		} else {
			b.add(p+".weight", InitWeight, out, in, kt, k, k)
		}
		b.add(p+".bias", InitBias, out)
	}
	res := func(p string, in, out int) {
		b.add(p+"residual.0.gamma", InitOne, in, 1, 1, 1)
		conv(p+"residual.2", out, in, 3, 3)
		b.add(p+"residual.3.gamma", InitOne, out, 1, 1, 1)
		conv(p+"residual.6", out, out, 3, 3)
		if in != out {
			conv(p+"shortcut", out, in, 1, 1)
		}
	}
	mid := func(p string, ch int) {
		res(p+"middle.0.", ch, ch)
		b.add(p+"middle.1.norm.gamma", InitOne, ch, 1, 1)
		conv(p+"middle.1.to_qkv", 3*ch, ch, 0, 1)
		conv(p+"middle.1.proj", ch, ch, 0, 1)
		res(p+"middle.2.", ch, ch)
	}
	edims := []int{dim, dim, 2 * dim, 4 * dim, 4 * dim}
	p := "encoder."
	conv(p+"conv1", dim, 3, 3, 3)
	idx := 0
	for i := 0; i < 4; i++ {
		in, out := edims[i], edims[i+1]
		for j := 0; j < 2; j++ {
			res(p+"downsamples."+itoa(idx)+".", in, out)
			in = out
			idx++
		}
		if i < 3 {
			q := p + "downsamples." + itoa(idx) + "."
			conv(q+"resample.1", out, out, 0, 3)
			if i > 0 {
				conv(q+"time_conv", out, out, 3, 1)
			}
			idx++
		}
	}
	mid(p, edims[4])
	b.add(p+"head.0.gamma", InitOne, edims[4], 1, 1, 1)
	conv(p+"head.2", 2*z, edims[4], 3, 3)
	conv("conv1", 2*z, 2*z, 1, 1)
	conv("conv2", z, z, 1, 1)
	ddims := []int{4 * dim, 4 * dim, 4 * dim, 2 * dim, dim}
	p = "decoder."
	conv(p+"conv1", ddims[0], z, 3, 3)
	mid(p, ddims[0])
	idx = 0
	for i := 0; i < 4; i++ {
		in, out := ddims[i], ddims[i+1]
		if i > 0 {
			in /= 2
		}
		for j := 0; j < 3; j++ {
			res(p+"upsamples."+itoa(idx)+".", in, out)
			in = out
			idx++
		}
		if i < 3 {
			q := p + "upsamples." + itoa(idx) + "."
			conv(q+"resample.1", out/2, out, 0, 3)
			if i < 2 {
				conv(q+"time_conv", 2*out, out, 3, 1)
			}
			idx++
		}
	}
	b.add(p+"head.0.gamma", InitOne, ddims[4], 1, 1, 1)
	conv(p+"head.2", 3, ddims[4], 3, 3)
}

// Part lists the tensors of one component (QwenImageParts) under its standalone file's names.
func (c QwenImage) Part(flag string) []TensorSpec {
	b := &builder{}
	switch flag {
	case "diffusion-model":
		c.buildDiT(b)
	case "llm":
		c.buildLLM(b)
	case "vae":
		wanVAE21(b, c.VAEDim, 16)
	}
	return b.out
}

// typeOf is the stored type of a component's tensor: Quant for the DiT's
// and the text encoder's matrices whose rows are whole blocks (the token
// embedding included), Type otherwise.
func (c QwenImage) typeOf(flag string, t TensorSpec) formats.DType {
	if c.Quant != 0 && flag != "vae" && len(t.Shape) == 2 && strings.HasSuffix(t.Name, ".weight") &&
		t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	return c.Type
}

// Metadata returns the metadata of a component's file ("" for the single
// file): the generate defaults and RoPE axes where the DiT is, the small
// tokenizer where the text encoder is (GGUF only).
func (c QwenImage) Metadata(flag string) formats.Metadata {
	u32 := func(k string, v int) formats.KV {
		return formats.KV{Key: k, Type: formats.TypeUint32, Value: uint32(v)}
	}
	str := func(k, v string) formats.KV { return formats.KV{Key: k, Type: formats.TypeString, Value: v} }
	md := formats.Metadata{str("general.name", "synthetic qwen-image")}
	if flag == "" || flag == "diffusion-model" {
		md = append(md, str("general.architecture", "qwen_image"),
			u32("sdtool.generate.width", c.Width), u32("sdtool.generate.height", c.Height), u32("sdtool.generate.steps", c.Steps))
		if c.Axes != "" {
			// infer.MetaQwenImageAxes, spelled out (internal packages do not import infer).
			md = append(md, str("sdtool.qwen_image.axes_dim", c.Axes))
		}
	}
	if flag == "" || flag == "llm" {
		if c.LLM.HeadDim != 128 {
			// infer.MetaLLMHeadDim, spelled out: 128 is what loaders assume.
			md = append(md, u32("sdtool.llm.head_dim", c.LLM.HeadDim))
		}
		if c.Tokenizer {
			md = append(md, QwenImageVocab().GGUFMetadata()...)
		}
	}
	return md
}

// vocab is the text encoder's embedding rows.
func (c QwenImage) vocab() int {
	if c.Tokenizer {
		return len(QwenImageVocab().Tokens)
	}
	return c.LLM.Vocab
}

// qwenImageMerges are the small vocabulary's merges (GPT-2's byte
// spelling: Ġ is a space), a few frequent pieces of prompts and of the
// chat template, so that the tokenizer merges something.
var qwenImageMerges = []string{"Ġ a", "Ġ c", "Ġc a", "Ġca t", "Ġ t", "Ġt h", "Ġth e", "e s", "i n", "o r"}

// QwenImageVocab is the small byte-level BPE vocabulary TinyQwenImage
// embeds: the 256 byte symbols in byte order, the merged pieces, then
// Qwen's control tokens of the chat template.
func QwenImageVocab() *text.ByteBPEVocab {
	v := &text.ByteBPEVocab{Pre: "qwen2"}
	for i := 0; i < 256; i++ {
		v.Tokens = append(v.Tokens, string(byteRune(byte(i))))
		v.Types = append(v.Types, text.TokenNormal)
	}
	for _, m := range qwenImageMerges {
		v.Merges = append(v.Merges, m)
		v.Tokens = append(v.Tokens, strings.ReplaceAll(m, " ", ""))
		v.Types = append(v.Types, text.TokenNormal)
	}
	for _, t := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		v.Tokens = append(v.Tokens, t)
		v.Types = append(v.Types, text.TokenControl)
	}
	return v
}

// byteRune is GPT-2's byte-to-unicode map: printable Latin-1 bytes stand
// for themselves, the others for 256 and up in byte order.
func byteRune(b byte) rune {
	if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
		return rune(b)
	}
	n := 0
	for c := 0; c < int(b); c++ {
		if !(c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE) {
			n++
		}
	}
	return rune(256 + n)
}

// EncodePart writes one component's file to w in format "gguf" or "safetensors".
func (c QwenImage) EncodePart(w io.Writer, format, flag string) error {
	ts := c.Part(flag)
	types := make([]formats.DType, len(ts))
	for i, t := range ts {
		types[i] = c.typeOf(flag, t)
	}
	return encodeSpecs(w, format, ts, nil, types, metadataFor(c.Metadata(flag), format), c.Seed)
}

// EncodeSingle writes every component into one file under ComfyUI's
// prefixes (a GGUF keeps the VAE's 5-D kernels: sd-cli's own GGUF reader
// and sdtool's take them, ggml's does not).
func (c QwenImage) EncodeSingle(w io.Writer, format string) error {
	return encodeSingle(w, format, c, QwenImageParts, qwenImageComfyPrefix, c.Seed)
}

// WriteParts writes one file per component into dir as NAME-FLAG.EXT (ext
// "gguf" or "safetensors") and returns the paths by flag. The VAE is
// always safetensors, as Qwen-Image's is published: its Conv3d kernels are
// 5-D, more than ggml's GGUF reader takes.
func (c QwenImage) WriteParts(dir, name, ext string) (map[string]string, error) {
	return writeParts(c, QwenImageParts, dir, name, func(flag string) string {
		if flag == "vae" {
			return "safetensors"
		}
		return ext
	})
}

// WriteSingle writes the single-file checkpoint into path (.gguf or .safetensors).
func (c QwenImage) WriteSingle(path string) error { return writeSingle(c, path) }

// String names the model's shape, for file names and logs.
func (c QwenImage) String() string {
	return "qwen-image-" + strconv.Itoa(c.Hidden) + "x" + strconv.Itoa(c.Layers) + "-llm" + strconv.Itoa(c.LLM.Hidden) + "x" + strconv.Itoa(c.LLM.Layers)
}

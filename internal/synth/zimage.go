package synth

import (
	"io"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/text"
)

// ZImage is a Z-Image model given by its exact widths and depths: the DiT
// under ComfyUI's names (Lumina 2's layout: fused qkv, refiners, pad
// tokens), a Qwen3 text encoder under Hugging Face's names (model.layers.N.),
// and Flux's 16-channel VAE without quant_conv, with the same
// deterministic values as Spec. It writes the layout people download (one
// file per component, for --diffusion-model, --llm and --vae) or one file
// with ComfyUI's prefixes. sd.cpp detects the DiT's widths and depths from
// the weights but fixes its RoPE (heads 128 wide, axes 32 48 48), Qwen3's
// heads (32 query and 8 key/value heads of 128) and the VAE's encoder, so
// ZImageParity keeps those and cuts the depths.
type ZImage struct {
	// Hidden, Heads and KVHeads shape the DiT's attention (heads Hidden/Heads wide).
	Hidden, Heads, KVHeads int
	// Layers and Refiners are the main blocks and the noise and context refiners (each).
	Layers, Refiners int
	// FF is the DiT's SwiGLU width.
	FF int
	// Axes, when not "", is written as the DiT's RoPE axes (sdtool's
	// metadata key, for heads narrower than Z-Image's 128).
	Axes string
	// LLM is the Qwen3 text encoder (its Hidden is the DiT's caption width;
	// its tokenizer, when set, is embedded in GGUF files).
	LLM LLM
	// ZeroEmbed stores the text encoder's token embedding as zeros, so its
	// hidden states are zero for every prompt (a DiT test that needs no
	// text encoder on the other side).
	ZeroEmbed bool
	// VAECh and VAEMult shape the VAE (2 residual blocks per level);
	// VAEDecCh, when not 0, narrows its decoder alone.
	VAECh, VAEDecCh int
	VAEMult         []int
	// Seed selects the values.
	Seed int64
	// Type is the float type of the DiT's and the VAE's tensors (F16 or
	// F32); Quant, when not 0, that of the DiT's 2-D linear weights whose
	// rows are whole blocks.
	Type, Quant formats.DType
	// Width, Height and Steps are the generate defaults written in the metadata.
	Width, Height, Steps int
}

// ZImageFull is Z-Image at full width with few blocks, for sd-cli
// comparisons of speed, memory and parity at the real widths: the DiT
// 3840 wide (30 heads of 128, SwiGLU 10240) with two layers and one
// refiner of each kind, Qwen3-4B at full width with two layers (Qwen3x4B,
// q8_0), and a VAE whose decoder is 32 wide (sd.cpp fixes the encoder's
// 128); the DiT and VAE f16 (q8_0 would quantize the DiT's activations
// too, which turns the two programs' last-bit differences into whole q8
// steps: 50.0 dB instead of 51 in one measurement).
var ZImageFull = ZImage{
	Hidden: 3840, Heads: 30, KVHeads: 30, Layers: 2, Refiners: 1, FF: 10240,
	LLM:   Qwen3x4B,
	VAECh: 128, VAEDecCh: 32, VAEMult: []int{1, 2, 4, 4},
	Seed: 7, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
}

// ZImageTurbo is Z-Image Turbo at its release's widths and depths, for
// the full-size speed and memory comparison with sd-cli: the 6 B DiT (30
// layers and two refiners of each kind, 3840 wide) with q8_0 matrices,
// Qwen3-4B whole (36 layers, q8_0, under llama.cpp's names, as a GGUF to
// quantize further) and Flux's VAE at full width. About 11 GB in all; its
// values are random, so it renders noise.
var ZImageTurbo = ZImage{
	Hidden: 3840, Heads: 30, KVHeads: 30, Layers: 30, Refiners: 2, FF: 10240,
	LLM:   func() LLM { l := Qwen3x4B; l.Layers, l.GGUFNames = 36, true; return l }(),
	VAECh: 128, VAEMult: []int{1, 2, 4, 4},
	Seed: 7, Type: formats.F16, Quant: formats.Q8_0, Width: 1024, Height: 1024, Steps: 8,
}

// ZImageParity is the Z-Image model of the sd-cli parity tests, narrow
// where sd.cpp reads the width from the weights so that both sides run in
// seconds: the DiT 768 wide (6 heads of 128, the width sd.cpp's RoPE
// fixes) with two layers and one refiner of each kind, a Qwen3 512 wide
// with Qwen3-4B's heads (32 query and 8 key/value heads of 128, which
// sd.cpp fixes) and its whole vocabulary, two layers, and ZImageFull's VAE.
var ZImageParity = ZImage{
	Hidden: 768, Heads: 6, KVHeads: 6, Layers: 2, Refiners: 1, FF: 2048,
	LLM:   LLM{QKNorm: true, Hidden: 512, FF: 1024, Layers: 2, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 151936, Seed: 11, Type: formats.F32, Quant: formats.Q8_0},
	VAECh: 128, VAEDecCh: 32, VAEMult: []int{1, 2, 4, 4},
	Seed: 7, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
}

// ZImageParts are the component flags ZImage writes, in sd-cli's order.
var ZImageParts = []string{"diffusion-model", "llm", "vae"}

// zimageComfyPrefix is each component's prefix in a single file
// (ComfyUI's DiT and VAE prefixes; the text encoder where sd-cli's
// convert puts it).
var zimageComfyPrefix = map[string]string{
	"diffusion-model": "model.diffusion_model.",
	"llm":             "text_encoders.llm.",
	"vae":             "vae.",
}

// buildDiT adds the DiT's tensors (ComfyUI names).
func (c ZImage) buildDiT(b *builder) {
	h, d := c.Hidden, c.Hidden/c.Heads
	const t = 256 // the time embedding's width, the modulations' input
	b.linear("x_embedder", h, 64, true)
	b.add("x_pad_token", InitBias, 1, h)
	b.add("cap_pad_token", InitBias, 1, h)
	b.linear("t_embedder.mlp.0", min(h, 1024), 256, true)
	b.linear("t_embedder.mlp.2", t, min(h, 1024), true)
	b.add("cap_embedder.0.weight", InitOne, c.LLM.Hidden)
	b.linear("cap_embedder.1", h, c.LLM.Hidden, true)
	block := func(p string, mod bool) {
		b.linear(p+".attention.qkv", (c.Heads+2*c.KVHeads)*d, h, false)
		b.linear(p+".attention.out", h, c.Heads*d, false)
		b.add(p+".attention.q_norm.weight", InitOne, d)
		b.add(p+".attention.k_norm.weight", InitOne, d)
		b.linear(p+".feed_forward.w1", c.FF, h, false)
		b.linear(p+".feed_forward.w2", h, c.FF, false)
		b.linear(p+".feed_forward.w3", c.FF, h, false)
		for _, n := range []string{"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"} {
			b.add(p+"."+n+".weight", InitOne, h)
		}
		if mod {
			b.linear(p+".adaLN_modulation.0", 4*h, t, true)
		}
	}
	for i := 0; i < c.Refiners; i++ {
		block("noise_refiner."+itoa(i), true)
		block("context_refiner."+itoa(i), false)
	}
	for i := 0; i < c.Layers; i++ {
		block("layers."+itoa(i), true)
	}
	b.linear("final_layer.linear", 64, h, true)
	b.linear("final_layer.adaLN_modulation.1", h, t, true)
}

// Part lists the tensors of one component (ZImageParts) under its standalone file's names.
func (c ZImage) Part(flag string) []TensorSpec {
	b := &builder{}
	switch flag {
	case "diffusion-model":
		c.buildDiT(b)
	case "llm":
		ts := c.LLM.Tensors()
		if c.ZeroEmbed {
			ts[0].Init = InitZero // model.embed_tokens.weight comes first
		}
		return ts
	case "vae":
		vaeConfig{Ch: c.VAECh, DecCh: c.VAEDecCh, InCh: 3, ZCh: 16, Mult: c.VAEMult, NumRes: 2, NoQuantConv: true}.build(b)
	}
	return b.out
}

// typeOf is the stored type of a component's tensor: the text encoder's
// own; Quant for the DiT's matrices whose rows are whole blocks; Type
// otherwise.
func (c ZImage) typeOf(flag string, t TensorSpec) formats.DType {
	if flag == "llm" {
		return c.LLM.typeOf(t)
	}
	if c.Quant != 0 && flag == "diffusion-model" && len(t.Shape) == 2 && strings.HasSuffix(t.Name, ".weight") &&
		t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	return c.Type
}

// Metadata returns the metadata of a component's file ("" for the single
// file): the generate defaults and RoPE axes where the DiT is, the LLM's
// tokenizer where the LLM is (GGUF only).
func (c ZImage) Metadata(flag string) formats.Metadata {
	u32 := func(k string, v int) formats.KV {
		return formats.KV{Key: k, Type: formats.TypeUint32, Value: uint32(v)}
	}
	str := func(k, v string) formats.KV { return formats.KV{Key: k, Type: formats.TypeString, Value: v} }
	md := formats.Metadata{str("general.name", "synthetic z-image")}
	if flag == "" || flag == "diffusion-model" {
		md = append(md, str("general.architecture", "lumina2"),
			u32("sdtool.generate.width", c.Width), u32("sdtool.generate.height", c.Height), u32("sdtool.generate.steps", c.Steps))
		if c.Axes != "" {
			// infer.MetaZImageAxes, spelled out (internal packages do not import infer).
			md = append(md, str("sdtool.z_image.axes_dim", c.Axes))
		}
	}
	if (flag == "" || flag == "llm") && c.LLM.Tokenizer != nil {
		md = append(md, c.LLM.Tokenizer.GGUFMetadata()...)
	}
	return md
}

// EncodePart writes one component's file to w in format "gguf" or "safetensors".
func (c ZImage) EncodePart(w io.Writer, format, flag string) error {
	ts := c.Part(flag)
	types := make([]formats.DType, len(ts))
	for i, t := range ts {
		types[i] = c.typeOf(flag, t)
	}
	return encodeSpecs(w, format, ts, nil, types, metadataFor(c.Metadata(flag), format), c.Seed)
}

// EncodeSingle writes every component into one file under ComfyUI's prefixes.
func (c ZImage) EncodeSingle(w io.Writer, format string) error {
	return encodeSingle(w, format, c, ZImageParts, zimageComfyPrefix, c.Seed)
}

// WriteParts writes one file per component into dir as NAME-FLAG.EXT (ext
// "gguf" or "safetensors") and returns the paths by flag.
func (c ZImage) WriteParts(dir, name, ext string) (map[string]string, error) {
	return writeParts(c, ZImageParts, dir, name, sameExt(ext))
}

// WriteSingle writes the single-file checkpoint into path (.gguf or .safetensors).
func (c ZImage) WriteSingle(path string) error { return writeSingle(c, path) }

// String names the model's shape, for file names and logs.
func (c ZImage) String() string {
	return "zimage-" + strconv.Itoa(c.Hidden) + "x" + strconv.Itoa(c.Layers) + "-llm" + strconv.Itoa(c.LLM.Hidden) + "x" + strconv.Itoa(c.LLM.Layers)
}

// TinyZImage is testdata/tiny-z-image-{diffusion-model,llm,vae}.gguf, the
// component files people download at a tiny size: a 128-wide DiT (two heads
// of 64, RoPE axes 16 24 24, SwiGLU 128) with one layer and one refiner of
// each kind; a 64-wide two-layer Qwen3 (two heads of 32, one key/value
// head) over a small byte-level vocabulary (QwenVocab of DefaultWords)
// embedded in its file; and a 32-wide VAE; all f16, as releases are, with
// 128x128 images in 4 steps by default (2.7 MB together).
var TinyZImage = ZImage{
	Hidden: 128, Heads: 2, KVHeads: 2, Layers: 1, Refiners: 1, FF: 128, Axes: "16,24,24",
	LLM: LLM{QKNorm: true, Hidden: 64, FF: 128, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 32,
		Vocab: len(QwenVocab(DefaultWords).Tokens), Seed: 9, Type: formats.F16, Tokenizer: QwenVocab(DefaultWords)},
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Seed: 8, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
}

// QwenVocab is a small byte-level BPE vocabulary with Qwen's
// pre-tokenizer: the 256 byte symbols in GPT-2's alphabet, merges that
// spell each word after a space ("Ġ") left to right, and Qwen's
// <|endoftext|>, <|im_start|> and <|im_end|> control tokens.
func QwenVocab(words []string) *text.ByteBPEVocab {
	v := &text.ByteBPEVocab{Pre: text.PreQwen2}
	sym := gpt2Bytes()
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, string(sym[b]))
	}
	seen := map[string]bool{}
	for _, w := range words {
		left := "Ġ"
		for _, r := range w {
			right := string(sym[byte(r)])
			if !seen[left+right] {
				seen[left+right] = true
				v.Merges = append(v.Merges, left+" "+right)
				v.Tokens = append(v.Tokens, left+right)
			}
			left += right
		}
	}
	v.Types = make([]int32, len(v.Tokens))
	for i := range v.Types {
		v.Types[i] = text.TokenNormal
	}
	for _, s := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, text.TokenControl)
	}
	return v
}

// gpt2Bytes is GPT-2's byte-to-symbol table: printable bytes stand for
// themselves, the others for the code points from 256 up, in byte order.
func gpt2Bytes() [256]rune {
	var out [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			out[b] = rune(b)
		} else {
			out[b] = next
			next++
		}
	}
	return out
}

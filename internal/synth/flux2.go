package synth

import (
	"io"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/text"
)

// Flux2 is a Flux.2 klein model given by its exact widths and depths: the
// DiT under BFL's names (no biases, gated MLPs, the three shared
// modulation layers), a Qwen3 text encoder (LLM) and the 32-channel VAE
// with quant_conv, with the same deterministic values as Spec. It writes
// the layout people download (one file per component, for
// --diffusion-model, --llm and --vae) or one file with sd-cli's prefixes.
// sd.cpp detects the DiT's widths and depths from the weights (txt_in's
// input is the text encoder's width times the hidden layers it reads) but
// fixes its RoPE (heads 128 wide, axes 32 32 32 32) and the VAE's encoder.
type Flux2 struct {
	// Hidden and Heads shape the DiT (heads Hidden/Heads wide); MLP is
	// its MLP width after the gate (klein: 3·Hidden).
	Hidden, Heads, MLP int
	// Double and Single are the block counts.
	Double, Single int
	// Context is txt_in's input width.
	Context int
	// Guidance adds dev's guidance embedding (guidance_in, no biases).
	Guidance bool
	// Axes, when not "", is written as the DiT's RoPE axes (sdtool's
	// metadata key, for heads narrower than 128).
	Axes string
	// LLM is the Qwen3 text encoder (its tokenizer, when set, is embedded
	// in GGUF files).
	LLM LLM
	// VAECh and VAEMult shape the VAE (2 residual blocks per level);
	// VAEDecCh, when not 0, narrows its decoder alone.
	VAECh, VAEDecCh int
	VAEMult         []int
	// Seed selects the values.
	Seed int64
	// Type is the float type of the DiT's and the VAE's tensors; Quant,
	// when not 0, that of the DiT's 2-D weights whose rows are whole blocks.
	Type, Quant formats.DType
	// Width, Height and Steps are the generate defaults written in the metadata.
	Width, Height, Steps int
}

// Flux2Parts are the component flags Flux2 writes, in sd-cli's order.
var Flux2Parts = []string{"diffusion-model", "llm", "vae"}

// flux2Prefix is each component's prefix in a single file.
var flux2Prefix = map[string]string{
	"diffusion-model": "model.diffusion_model.",
	"llm":             "text_encoders.llm.",
	"vae":             "first_stage_model.",
}

// KleinParity is the Flux.2 klein 4B of the sd-cli comparisons: the DiT at
// full width (3072, 24 heads of 128, gated MLP 9216) with one block of
// each kind, reading a two-layer Qwen3-4B at full width (Qwen3x4B, whose
// final norm is all a two-layer model gives for layers 9, 18 and 27, so
// txt_in takes 2560), and a VAE whose decoder is 32 wide; DiT weights q8_0.
var KleinParity = Flux2{
	Hidden: 3072, Heads: 24, MLP: 9216, Double: 1, Single: 1, Context: 2560,
	LLM:   Qwen3x4B,
	VAECh: 128, VAEDecCh: 32, VAEMult: []int{1, 2, 4, 4},
	Seed: 21, Type: formats.F16, Quant: formats.Q8_0, Width: 128, Height: 128, Steps: 4,
}

// Klein9BParity is KleinParity at Flux.2 klein 9B's widths: the DiT 4096
// wide (32 heads of 128, gated MLP 12288) with one block of each kind,
// reading a two-layer Qwen3-8B at full width (Qwen3x8B: its final norm,
// 4096 wide, stands for layers 9, 18 and 27).
var Klein9BParity = Flux2{
	Hidden: 4096, Heads: 32, MLP: 12288, Double: 1, Single: 1, Context: 4096,
	LLM:   Qwen3x8B,
	VAECh: 128, VAEDecCh: 32, VAEMult: []int{1, 2, 4, 4},
	Seed: 23, Type: formats.F16, Quant: formats.Q8_0, Width: 128, Height: 128, Steps: 4,
}

// TinyKlein is testdata/tiny-flux2-klein.gguf: a 128-wide DiT (two heads
// of 64, RoPE axes 16 16 16 16, gated MLP 384) with one block of each
// kind, a 64-wide two-layer Qwen3 over a small byte-level vocabulary
// embedded in the file, and a 32-wide VAE, f16 with q8_0 DiT matrices,
// 128x128 images in 4 steps by default.
var TinyKlein = Flux2{
	Hidden: 128, Heads: 2, MLP: 384, Double: 1, Single: 1, Context: 64, Axes: "16,16,16,16",
	LLM: LLM{QKNorm: true, Hidden: 64, FF: 128, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 32,
		Vocab: len(kleinVocab(DefaultWords).Tokens), Seed: 22, Type: formats.F16, Tokenizer: kleinVocab(DefaultWords)},
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Seed: 22, Type: formats.F16, Quant: formats.Q8_0, Width: 128, Height: 128, Steps: 4,
}

// buildDiT adds the DiT's tensors (BFL names).
func (c Flux2) buildDiT(b *builder) {
	h, d := c.Hidden, c.Hidden/c.Heads
	b.linear("img_in", h, 128, false)
	b.linear("time_in.in_layer", h, 256, false)
	b.linear("time_in.out_layer", h, h, false)
	if c.Guidance {
		b.linear("guidance_in.in_layer", h, 256, false)
		b.linear("guidance_in.out_layer", h, h, false)
	}
	b.linear("txt_in", h, c.Context, false)
	b.linear("double_stream_modulation_img.lin", 6*h, h, false)
	b.linear("double_stream_modulation_txt.lin", 6*h, h, false)
	b.linear("single_stream_modulation.lin", 3*h, h, false)
	qk := func(p string) {
		b.add(p+".query_norm.scale", InitOne, d)
		b.add(p+".key_norm.scale", InitOne, d)
	}
	for i := 0; i < c.Double; i++ {
		for _, st := range []string{"img", "txt"} {
			p := "double_blocks." + itoa(i) + "." + st
			b.linear(p+"_attn.qkv", 3*h, h, false)
			qk(p + "_attn.norm")
			b.linear(p+"_attn.proj", h, h, false)
			b.linear(p+"_mlp.0", 2*c.MLP, h, false)
			b.linear(p+"_mlp.2", h, c.MLP, false)
		}
	}
	for i := 0; i < c.Single; i++ {
		p := "single_blocks." + itoa(i)
		b.linear(p+".linear1", 3*h+2*c.MLP, h, false)
		b.linear(p+".linear2", h, h+c.MLP, false)
		qk(p + ".norm")
	}
	b.linear("final_layer.linear", 128, h, false)
	b.linear("final_layer.adaLN_modulation.1", 2*h, h, false)
}

// Part lists the tensors of one component (Flux2Parts) under its standalone file's names.
func (c Flux2) Part(flag string) []TensorSpec {
	b := &builder{}
	switch flag {
	case "diffusion-model":
		c.buildDiT(b)
	case "llm":
		return c.LLM.Tensors()
	case "vae":
		vaeConfig{Ch: c.VAECh, DecCh: c.VAEDecCh, InCh: 3, ZCh: 32, Mult: c.VAEMult, NumRes: 2}.build(b)
	}
	return b.out
}

// typeOf is the stored type of a component's tensor.
func (c Flux2) typeOf(flag string, t TensorSpec) formats.DType {
	if flag == "llm" {
		return c.LLM.typeOf(t)
	}
	if c.Quant != 0 && flag == "diffusion-model" && len(t.Shape) == 2 && t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	return c.Type
}

// Metadata returns the metadata of a component's file ("" for the single
// file): the generate defaults and RoPE axes where the DiT is, the LLM's
// tokenizer where the LLM is (GGUF only).
func (c Flux2) Metadata(flag string) formats.Metadata {
	u32 := func(k string, v int) formats.KV {
		return formats.KV{Key: k, Type: formats.TypeUint32, Value: uint32(v)}
	}
	str := func(k, v string) formats.KV { return formats.KV{Key: k, Type: formats.TypeString, Value: v} }
	md := formats.Metadata{str("general.name", "synthetic "+c.title())}
	if flag == "" || flag == "diffusion-model" {
		md = append(md, str("general.architecture", "flux"),
			u32("sdtool.generate.width", c.Width), u32("sdtool.generate.height", c.Height), u32("sdtool.generate.steps", c.Steps))
		if c.Axes != "" {
			// infer.MetaFluxAxes, spelled out (internal packages do not import infer).
			md = append(md, str("sdtool.flux.axes_dim", c.Axes))
		}
	}
	if (flag == "" || flag == "llm") && c.LLM.Tokenizer != nil {
		md = append(md, c.LLM.Tokenizer.GGUFMetadata()...)
	}
	return md
}

// EncodePart writes one component's file to w in format "gguf" or "safetensors".
func (c Flux2) EncodePart(w io.Writer, format, flag string) error {
	if flag == "llm" {
		return c.LLM.EncodeAs(w, format)
	}
	ts := c.Part(flag)
	types := make([]formats.DType, len(ts))
	for i, t := range ts {
		types[i] = c.typeOf(flag, t)
	}
	return encodeSpecs(w, format, ts, nil, types, metadataFor(c.Metadata(flag), format), c.Seed)
}

// EncodeSingle writes every component into one file under sd-cli's prefixes.
func (c Flux2) EncodeSingle(w io.Writer, format string) error {
	return encodeSingle(w, format, c, Flux2Parts, flux2Prefix, c.Seed)
}

// WriteParts writes one file per component into dir as NAME-FLAG.EXT (ext
// "gguf" or "safetensors") and returns the paths by flag.
func (c Flux2) WriteParts(dir, name, ext string) (map[string]string, error) {
	return writeParts(c, Flux2Parts, dir, name, sameExt(ext))
}

// WriteSingle writes the single-file checkpoint into path (.gguf or .safetensors).
func (c Flux2) WriteSingle(path string) error { return writeSingle(c, path) }

// title names the variant: dev has a guidance embedding.
func (c Flux2) title() string {
	if c.Guidance {
		return "flux.2 dev"
	}
	return "flux.2 klein"
}

// String names the model's shape, for file names and logs.
func (c Flux2) String() string {
	return "flux2-" + strconv.Itoa(c.Hidden) + "x" + strconv.Itoa(c.Double) + "x" + strconv.Itoa(c.Single) +
		"-llm" + strconv.Itoa(c.LLM.Hidden) + "x" + strconv.Itoa(c.LLM.Layers)
}

// kleinVocab is a small byte-level BPE vocabulary with Qwen's
// pre-tokenizer: the 256 byte symbols in GPT-2's alphabet, merges that
// spell each word after a space ("Ġ") left to right, and the control
// tokens klein's template and padding use.
func kleinVocab(words []string) *text.ByteBPEVocab {
	v := &text.ByteBPEVocab{Pre: text.PreQwen2}
	var sym [256]string
	next := rune(256)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r, next = next, next+1
		}
		sym[b] = string(r)
		v.Tokens = append(v.Tokens, sym[b])
	}
	seen := map[string]bool{}
	for _, w := range words {
		left := "Ġ"
		for _, r := range w {
			right := sym[byte(r)]
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
	for _, s := range strings.Fields("<|endoftext|> <|im_start|> <|im_end|> <think> </think>") {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, text.TokenControl)
	}
	return v
}

package synth

import (
	"io"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/text"
)

// Flux is a Flux.1 model (dev with a guidance embedding, schnell without)
// given by its exact widths and depths: the DiT under BFL's names, CLIP-L
// (Hugging Face names under text_model.), the 16-channel VAE without
// quant_conv, and optionally a T5 v1.1 encoder (T5EncoderModel names),
// with the same deterministic values as Spec and a CLIP tokenizer for a
// short word list in the metadata. It writes the layout people download
// (one file per component, for --diffusion-model, --clip_l, --t5xxl and
// --vae) or one file with ComfyUI's prefixes. sd.cpp detects the DiT's
// width, depths and heads from the weights but fixes CLIP-L's (768 wide, 12
// layers), the VAE's (128 channels, 1 2 4 4), T5's context width (4096)
// and the DiT's RoPE (128-wide heads), so FluxParity keeps those and cuts
// the block counts.
type Flux struct {
	// Hidden and Heads shape the DiT (heads Hidden/Heads wide; its MLP is 4·Hidden).
	Hidden, Heads int
	// Double and Single are the block counts.
	Double, Single int
	// Guidance adds guidance_in (Flux.1 dev).
	Guidance bool
	// ApproxInner and ApproxLayers, when ApproxInner is not 0, make the
	// DiT Chroma's: an approximator (distilled_guidance_layer) that wide
	// and deep (sd.cpp fixes 5120 and 5) instead of the time, guidance,
	// vector and modulation layers. Chroma has no CLIP: leave CLIP zero.
	ApproxInner, ApproxLayers int
	// Context is the text tokens' width (txt_in's input; T5-XXL: 4096).
	Context int
	// CLIP shapes CLIP-L (its width is the DiT's vector_in input).
	CLIP TextModel
	// T5, when not nil, adds a T5 encoder (its Hidden must be Context),
	// with its tokenizer in the GGUF metadata.
	T5 *T5
	// VAECh and VAEMult shape the VAE (2 residual blocks per level);
	// VAEDecCh, when not 0, narrows its decoder alone.
	VAECh, VAEDecCh int
	VAEMult         []int
	// Words are the prompt words the embedded CLIP tokenizer knows whole.
	Words []string
	// Seed selects the values.
	Seed int64
	// Type is the float type of every tensor (F16 or F32); Quant, when not
	// 0, that of the DiT's 2-D linear weights whose rows are whole blocks.
	Type, Quant formats.DType
	// Width, Height and Steps are the generate defaults written in the metadata.
	Width, Height, Steps int
	// Realistic draws the DiT's linear weights with InitWeightRealistic.
	Realistic bool
}

// FluxFull is a Flux.1 dev model at full widths with few blocks, for
// sd-cli comparisons of speed and memory: the DiT 3072 wide (24 heads of
// 128) with one double and one single block, the full CLIP-L and VAE, and
// T5-XXL at full width (4096, 64 heads of 64, its 32128-row embedding)
// with two layers; about 1.2 billion parameters.
var FluxFull = Flux{
	Hidden: 3072, Heads: 24, Double: 1, Single: 1, Guidance: true, Context: 4096,
	CLIP:  TextModel{Hidden: 768, FF: 3072, Layers: 12, Heads: 12},
	T5:    &T5{Hidden: 4096, FF: 10240, Layers: 2, Heads: 64, HeadDim: 64, Buckets: 32, Vocab: 32128, Words: DefaultWords, Seed: 3, Type: formats.F16},
	VAECh: 128, VAEMult: []int{1, 2, 4, 4},
	Words: DefaultWords, Seed: 3, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
}

// FluxParity is the Flux.1 dev model of the sd-cli image parity tests,
// narrower where sd.cpp reads the width from the weights so that both
// sides run in a minute: the DiT 768 wide (6 heads of 128) with two double
// and two single blocks, the full CLIP-L (sd.cpp fixes it), a 512-wide T5
// of two layers (8 heads of 64) and a VAE whose decoder is 32 wide (sd.cpp
// fixes the encoder's 128).
var FluxParity = Flux{
	Hidden: 768, Heads: 6, Double: 2, Single: 2, Guidance: true, Context: 512,
	CLIP:  TextModel{Hidden: 768, FF: 3072, Layers: 12, Heads: 12},
	T5:    &T5{Hidden: 512, FF: 1024, Layers: 2, Heads: 8, HeadDim: 64, Buckets: 32, Vocab: 32128, Words: DefaultWords, Seed: 3, Type: formats.F16},
	VAECh: 128, VAEDecCh: 32, VAEMult: []int{1, 2, 4, 4},
	Words: DefaultWords, Seed: 3, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
}

// FluxBench is the Flux layout of the ComfyUI format figures in
// BENCHMARKS.md: a 256-wide DiT (two heads of 128) with two double and two
// single blocks whose linear weights have realistic statistics (outlier
// input channels, heavy tails, per-row spread; InitWeightRealistic), the
// tiny text encoders and VAE, f16.
var FluxBench = Flux{
	Hidden: 256, Heads: 2, Double: 2, Single: 2, Guidance: true, Context: 64,
	CLIP:  TextModel{Hidden: 64, FF: 64, Layers: 2, Heads: 1},
	T5:    &TinyT5,
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Words: DefaultWords, Seed: 5, Type: formats.F16, Width: 128, Height: 128, Steps: 4, Realistic: true,
}

// TinyFlux is testdata/tiny-flux.gguf: a 128-wide DiT (one 128-wide head,
// one block of each kind; its linear weights q8_0) with its guidance
// embedding, a 64-wide two-layer CLIP-L, TinyT5 and a 32-wide VAE, f16,
// with 128x128 images in 4 steps by default (under 3 MB).
var TinyFlux = Flux{
	Hidden: 128, Heads: 1, Double: 1, Single: 1, Guidance: true, Context: 64,
	CLIP:  TextModel{Hidden: 64, FF: 64, Layers: 2, Heads: 1},
	T5:    &TinyT5,
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Words: DefaultWords, Seed: 4, Type: formats.F16, Quant: formats.Q8_0, Width: 128, Height: 128, Steps: 4,
}

// ChromaParity is the Chroma model of the sd-cli image parity tests:
// FluxParity's DiT (768 wide, two blocks of each kind) without its
// modulation layers, the approximator at the full size sd.cpp fixes (5120
// wide, 5 layers), FluxParity's T5 and VAE, and no CLIP.
var ChromaParity = Flux{
	Hidden: 768, Heads: 6, Double: 2, Single: 2, Context: 512, ApproxInner: 5120, ApproxLayers: 5,
	T5:    &T5{Hidden: 512, FF: 1024, Layers: 2, Heads: 8, HeadDim: 64, Buckets: 32, Vocab: 32128, Words: DefaultWords, Seed: 3, Type: formats.F16},
	VAECh: 128, VAEDecCh: 32, VAEMult: []int{1, 2, 4, 4},
	Words: DefaultWords, Seed: 6, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
}

// TinyChroma is testdata/tiny-chroma.gguf: TinyFlux's DiT as Chroma (a
// 64-wide approximator of two layers instead of the modulation layers;
// linear weights q8_0), TinyT5 and the 32-wide VAE, no CLIP, f16, with
// 128x128 images in 4 steps by default (under 3 MB).
var TinyChroma = Flux{
	Hidden: 128, Heads: 1, Double: 1, Single: 1, Context: 64, ApproxInner: 64, ApproxLayers: 2,
	T5:    &TinyT5,
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Words: DefaultWords, Seed: 7, Type: formats.F16, Quant: formats.Q8_0, Width: 128, Height: 128, Steps: 4,
}

// Vocab returns the CLIP tokenizer's vocabulary size (SD.Vocab's).
func (c Flux) Vocab() int { return SD{Words: c.Words}.Vocab() }

// clipVocab is the CLIP-L embedding's rows: sd.cpp's fixed 49408 at full
// width, else the tokenizer's vocabulary.
func (c Flux) clipVocab() int {
	if c.CLIP.Hidden == 768 {
		return 49408
	}
	return c.Vocab()
}

// FluxParts are the component flags Flux writes, in sd-cli's order.
var FluxParts = []string{"diffusion-model", "clip_l", "t5xxl", "vae"}

// LDMPrefix is each component's prefix in a single file that names its VAE
// as LDM checkpoints do (first_stage_model.), which sd.cpp's name conversion
// reads as well as ComfyUI's vae.; its text encoders keep ComfyUI's prefixes
// (sd.cpp 97d2990 maps cond_stage_model. to SD's CLIP, never to Flux's).
var LDMPrefix = map[string]string{
	"diffusion-model": "model.diffusion_model.",
	"clip_l":          "text_encoders.clip_l.transformer.",
	"t5xxl":           "text_encoders.t5xxl.transformer.",
	"vae":             "first_stage_model.",
}

// comfyPrefix is each component's prefix in a ComfyUI single-file checkpoint.
var comfyPrefix = map[string]string{
	"diffusion-model": "model.diffusion_model.",
	"clip_l":          "text_encoders.clip_l.transformer.",
	"t5xxl":           "text_encoders.t5xxl.transformer.",
	"vae":             "vae.",
}

// Part lists the tensors of one component (FluxParts) under its standalone
// file's names; nil for "t5xxl" without a T5.
func (c Flux) Part(flag string) []TensorSpec {
	b := &builder{}
	switch flag {
	case "diffusion-model":
		fluxConfig{Hidden: c.Hidden, HeadDim: c.Hidden / c.Heads, MLP: 4 * c.Hidden, Double: c.Double, Single: c.Single,
			In: 64, VecIn: c.CLIP.Hidden, ContextIn: c.Context, TimeIn: 256, Guidance: c.Guidance,
			ApproxInner: c.ApproxInner, ApproxLayers: c.ApproxLayers}.build(b)
	case "clip_l":
		if c.CLIP.Layers == 0 {
			return nil
		}
		b.prefix = "text_model."
		clipConfig{Hidden: c.CLIP.Hidden, FF: c.CLIP.FF, Layers: c.CLIP.Layers, Vocab: c.clipVocab(), Positions: 77}.buildHF(b)
	case "t5xxl":
		if c.T5 == nil {
			return nil
		}
		ts, err := c.T5.withNaming(T5HF).Tensors()
		if err != nil {
			panic(err) // the presets' sizes are valid
		}
		return ts
	case "vae":
		vaeConfig{Ch: c.VAECh, DecCh: c.VAEDecCh, InCh: 3, ZCh: 16, Mult: c.VAEMult, NumRes: 2, NoQuantConv: true}.build(b)
	}
	return b.out
}

// typeOf is the stored type of a component's tensor.
func (c Flux) typeOf(flag string, t TensorSpec) formats.DType {
	if flag == "t5xxl" {
		return c.T5.typeOf(t)
	}
	if c.Quant != 0 && flag == "diffusion-model" && len(t.Shape) == 2 && t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	return c.Type
}

// Metadata returns the metadata of a component's file ("" for the single
// file): the CLIP tokenizer's merges and heads where CLIP-L is, the T5
// tokenizer where T5 is (GGUF only), the generate defaults where the DiT is.
func (c Flux) Metadata(flag string) formats.Metadata {
	u32 := func(k string, v int) formats.KV {
		return formats.KV{Key: k, Type: formats.TypeUint32, Value: uint32(v)}
	}
	str := func(k, v string) formats.KV { return formats.KV{Key: k, Type: formats.TypeString, Value: v} }
	md := formats.Metadata{str("general.name", "synthetic flux")}
	if flag == "" || flag == "diffusion-model" {
		md = append(md, str("general.architecture", "flux"),
			u32("sdtool.generate.width", c.Width), u32("sdtool.generate.height", c.Height), u32("sdtool.generate.steps", c.Steps))
	}
	if (flag == "" || flag == "clip_l") && c.CLIP.Layers > 0 {
		// infer.MetadataMergesKey and infer.MetaCLIPHeads, spelled out (internal packages do not import infer).
		md = append(md, str("sdtool.tokenizer.clip.merges", "#version: 0.2\n"+strings.Join(Merges(c.Words), "\n")),
			u32("sdtool.clip.num_heads", c.CLIP.Heads))
	}
	if c.T5 != nil && (flag == "" || flag == "t5xxl") {
		if tok, err := c.T5.Tokenizer(); err == nil {
			md = text.EmbedUnigram(md, tok)
		}
	}
	return md
}

// metadataFor drops the T5 tokenizer's keys from a file that cannot hold
// them (safetensors metadata is strings; the vocabulary is arrays).
func metadataFor(md formats.Metadata, format string) formats.Metadata {
	if format == "gguf" {
		return md
	}
	var out formats.Metadata
	for _, kv := range md {
		if !strings.HasPrefix(kv.Key, "tokenizer.") {
			out = append(out, kv)
		}
	}
	return out
}

// EncodePart writes one component's file to w in format "gguf" or "safetensors".
func (c Flux) EncodePart(w io.Writer, format, flag string) error {
	ts := c.Part(flag)
	types := make([]formats.DType, len(ts))
	for i, t := range ts {
		types[i] = c.typeOf(flag, t)
	}
	return encodeSpecs(w, format, ts, nil, types, metadataFor(c.Metadata(flag), format), c.Seed)
}

// EncodeSingle writes every component into one file with ComfyUI's prefixes.
func (c Flux) EncodeSingle(w io.Writer, format string) error {
	return c.EncodeSingleAs(w, format, comfyPrefix)
}

// EncodeSingleAs writes every component into one file, each under its
// prefix in prefix (keyed by FluxParts' flags; LDMPrefix, say).
func (c Flux) EncodeSingleAs(w io.Writer, format string, prefix map[string]string) error {
	var ts []TensorSpec
	var names []string
	var types []formats.DType
	for _, flag := range FluxParts {
		for _, t := range c.Part(flag) {
			if c.Realistic && flag == "diffusion-model" && t.Init == InitWeight && len(t.Shape) == 2 {
				t.Init = InitWeightRealistic
			}
			types = append(types, c.typeOf(flag, t))
			names = append(names, prefix[flag]+t.Name)
			ts = append(ts, t)
		}
	}
	return encodeSpecs(w, format, ts, names, types, metadataFor(c.Metadata(""), format), c.Seed)
}

// WriteParts writes one file per component into dir as NAME-FLAG.EXT (ext
// "gguf" or "safetensors") and returns the paths by flag.
func (c Flux) WriteParts(dir, name, ext string) (map[string]string, error) {
	return writeParts(c, FluxParts, dir, name, sameExt(ext))
}

// WriteSingle writes the single-file checkpoint into path (.gguf or .safetensors).
func (c Flux) WriteSingle(path string) error { return writeSingle(c, path) }

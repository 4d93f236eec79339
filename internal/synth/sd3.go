package synth

import (
	"io"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/text"
)

// SD3 is an SD 3 / 3.5 model given by its exact widths and depths: the
// MMDiT under SD3's names (sd.cpp's), CLIP-L and CLIP-G (Hugging Face
// names under text_model., both with text_projection), optionally T5 (its
// Hidden must be Context), and the 16-channel VAE without quant_conv,
// with a CLIP tokenizer for a short word list in the metadata. sd.cpp
// takes an MMDiT's heads from its depth (SD3 is 64 wide per block) and
// reads at least 24 blocks, so a model for sd-cli needs Depth >= 24.
type SD3 struct {
	// Hidden and Depth shape the DiT (Depth heads, Hidden/Depth wide; MLP 4·Hidden).
	Hidden, Depth int
	// XSelf is how many leading blocks have an image-only attn2 (3.5 medium: 13).
	XSelf int
	// QKNorm adds RMS norms of queries and keys (3.5).
	QKNorm bool
	// PosMax is the side of the learned position table (192; 3.5 medium 384).
	PosMax int
	// Context is the text tokens' width (4096); CLIP-L's and CLIP-G's widths must add up to at most it.
	Context int
	// L and G shape the two CLIP text models.
	L, G TextModel
	// T5, when not nil, adds a T5 encoder.
	T5 *T5
	// VAECh and VAEMult shape the VAE (2 residual blocks per level);
	// VAEDecCh, when not 0, narrows its decoder alone.
	VAECh, VAEDecCh int
	VAEMult         []int
	// Words are the prompt words the embedded CLIP tokenizer knows whole.
	Words []string
	// Seed selects the values; Type is every tensor's float type and
	// Quant, when not 0, that of the DiT's 2-D linear weights whose rows
	// are whole blocks.
	Seed        int64
	Type, Quant formats.DType
	// Width, Height and Steps are the generate defaults written in the metadata.
	Width, Height, Steps int
}

// TinySD3 is testdata/tiny-sd3.gguf: 3.5 medium's layout (attn2 in the
// first block, RMS QK norms) 128 wide with two joint blocks, 32-wide
// CLIP-L and CLIP-G of two layers, TinyT5 and a 32-wide VAE, f16 with the
// DiT's linear weights q8_0, with 128x128 images in 4 steps by default
// (under 3 MB).
var TinySD3 = SD3{
	Hidden: 128, Depth: 2, XSelf: 1, QKNorm: true, PosMax: 16, Context: 64,
	L: TextModel{Hidden: 32, FF: 64, Layers: 2, Heads: 1}, G: TextModel{Hidden: 32, FF: 64, Layers: 2, Heads: 1},
	T5:    &TinyT5,
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Words: DefaultWords, Seed: 8, Type: formats.F16, Quant: formats.Q8_0, Width: 128, Height: 128, Steps: 4,
}

// SD3ParityMedium and SD3ParityLarge are the SD 3.5 medium and large
// layouts of the sd-cli image parity tests, at the depths sd.cpp needs
// (24 and 38 blocks: it reads at least 24 and takes the heads from the
// depth) but narrow (heads 16 and 8 wide instead of 64): medium with
// attn2 in its first 13 blocks and the 384-wide position table, large
// without attn2; both with RMS QK norms, the full CLIP-L and CLIP-G
// (sd.cpp fixes both; it cannot run SD3 with one CLIP alone), no T5
// (sd.cpp fixes its context at 4096; both sides condition on zeros in its
// place) and the VAE with a 32-wide decoder.
var (
	SD3ParityMedium = SD3{
		Hidden: 384, Depth: 24, XSelf: 13, QKNorm: true, PosMax: 384, Context: 4096,
		L: TextModel{Hidden: 768, FF: 3072, Layers: 12, Heads: 12}, G: TextModel{Hidden: 1280, FF: 5120, Layers: 32, Heads: 20},
		VAECh: 128, VAEDecCh: 32, VAEMult: []int{1, 2, 4, 4},
		Words: DefaultWords, Seed: 9, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
	}
	SD3ParityLarge = SD3{
		Hidden: 304, Depth: 38, QKNorm: true, PosMax: 192, Context: 4096,
		L: TextModel{Hidden: 768, FF: 3072, Layers: 12, Heads: 12}, G: TextModel{Hidden: 1280, FF: 5120, Layers: 32, Heads: 20},
		VAECh: 128, VAEDecCh: 32, VAEMult: []int{1, 2, 4, 4},
		Words: DefaultWords, Seed: 10, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
	}
)

// SD3Parts are the component flags SD3 writes, in sd-cli's order.
var SD3Parts = []string{"diffusion-model", "clip_l", "clip_g", "t5xxl", "vae"}

// sd3Prefix is each component's prefix in a single-file checkpoint.
var sd3Prefix = map[string]string{
	"diffusion-model": "model.diffusion_model.",
	"clip_l":          "text_encoders.clip_l.transformer.",
	"clip_g":          "text_encoders.clip_g.transformer.",
	"t5xxl":           "text_encoders.t5xxl.transformer.",
	"vae":             "first_stage_model.",
}

// clipVocab is a CLIP embedding's rows: sd.cpp's fixed 49408 at full width, else the tokenizer's.
func (c SD3) clipVocab(m TextModel) int {
	if m.Hidden >= 768 {
		return 49408
	}
	return SD{Words: c.Words}.Vocab()
}

// Part lists the tensors of one component (SD3Parts) under its standalone file's names.
func (c SD3) Part(flag string) []TensorSpec {
	b := &builder{}
	switch flag {
	case "diffusion-model":
		c.buildDiT(b)
	case "clip_l", "clip_g":
		m := c.L
		if flag == "clip_g" {
			m = c.G
		}
		if m.Layers == 0 {
			return nil
		}
		b.prefix = "text_model."
		clipConfig{Hidden: m.Hidden, FF: m.FF, Layers: m.Layers, Vocab: c.clipVocab(m), Positions: 77, Projection: true}.buildHF(b)
		// CLIPTextModelWithProjection keeps the projection beside text_model., not in it.
		for i := range b.out {
			if b.out[i].Name == "text_model.text_projection.weight" {
				b.out[i].Name = "text_projection.weight"
			}
		}
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

// buildDiT adds the MMDiT's tensors.
func (c SD3) buildDiT(b *builder) {
	h, d := c.Hidden, c.Hidden/c.Depth
	b.add("x_embedder.proj.weight", InitWeight, h, 16, 2, 2)
	b.add("x_embedder.proj.bias", InitBias, h)
	b.add("pos_embed", InitWeight, 1, c.PosMax*c.PosMax, h)
	b.linear("t_embedder.mlp.0", h, 256, true)
	b.linear("t_embedder.mlp.2", h, h, true)
	b.linear("y_embedder.mlp.0", h, c.L.Hidden+c.G.Hidden, true)
	b.linear("y_embedder.mlp.2", h, h, true)
	b.linear("context_embedder", h, c.Context, true)
	for i := 0; i < c.Depth; i++ {
		for _, st := range []string{"context_block", "x_block"} {
			p := "joint_blocks." + itoa(i) + "." + st + "."
			last := st == "context_block" && i == c.Depth-1
			self := st == "x_block" && i < c.XSelf
			mods := 6
			switch {
			case last:
				mods = 2
			case self:
				mods = 9
			}
			b.linear(p+"adaLN_modulation.1", mods*h, h, true)
			attns := []string{"attn"}
			if self {
				attns = append(attns, "attn2")
			}
			for _, a := range attns {
				b.linear(p+a+".qkv", 3*h, h, true)
				if !last {
					b.linear(p+a+".proj", h, h, true)
				}
				if c.QKNorm {
					b.add(p+a+".ln_q.weight", InitOne, d)
					b.add(p+a+".ln_k.weight", InitOne, d)
				}
			}
			if !last {
				b.linear(p+"mlp.fc1", 4*h, h, true)
				b.linear(p+"mlp.fc2", h, 4*h, true)
			}
		}
	}
	b.linear("final_layer.linear", 4*16, h, true)
	b.linear("final_layer.adaLN_modulation.1", 2*h, h, true)
}

// Metadata returns a component's file's metadata ("" for the single file).
func (c SD3) Metadata(flag string) formats.Metadata {
	u32 := func(k string, v int) formats.KV {
		return formats.KV{Key: k, Type: formats.TypeUint32, Value: uint32(v)}
	}
	str := func(k, v string) formats.KV { return formats.KV{Key: k, Type: formats.TypeString, Value: v} }
	md := formats.Metadata{str("general.name", "synthetic sd3")}
	if flag == "" || flag == "diffusion-model" {
		md = append(md, str("general.architecture", "sd3"),
			u32("sdtool.generate.width", c.Width), u32("sdtool.generate.height", c.Height), u32("sdtool.generate.steps", c.Steps))
	}
	if flag == "" || flag == "clip_l" || flag == "clip_g" {
		md = append(md, str("sdtool.tokenizer.clip.merges", "#version: 0.2\n"+strings.Join(Merges(c.Words), "\n")))
	}
	if (flag == "" || flag == "clip_l") && c.L.Layers > 0 {
		md = append(md, u32("sdtool.clip.num_heads", c.L.Heads))
	}
	if (flag == "" || flag == "clip_g") && c.G.Layers > 0 {
		md = append(md, u32("sdtool.clip_g.num_heads", c.G.Heads))
	}
	if c.T5 != nil && (flag == "" || flag == "t5xxl") {
		if tok, err := c.T5.Tokenizer(); err == nil {
			md = text.EmbedUnigram(md, tok)
		}
	}
	return md
}

// typeOf is the stored type of a component's tensor.
func (c SD3) typeOf(flag string, t TensorSpec) formats.DType {
	if flag == "t5xxl" {
		return c.T5.typeOf(t)
	}
	if c.Quant != 0 && flag == "diffusion-model" && len(t.Shape) == 2 && t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	return c.Type
}

// EncodeSingle writes every component into one file under SD3's checkpoint prefixes.
func (c SD3) EncodeSingle(w io.Writer, format string) error {
	return encodeSingle(w, format, c, SD3Parts, sd3Prefix, c.Seed)
}

// EncodePart writes one component's file to w in format "gguf" or "safetensors".
func (c SD3) EncodePart(w io.Writer, format, flag string) error {
	ts := c.Part(flag)
	types := make([]formats.DType, len(ts))
	for i, t := range ts {
		types[i] = c.typeOf(flag, t)
	}
	return encodeSpecs(w, format, ts, nil, types, metadataFor(c.Metadata(flag), format), c.Seed)
}

// WriteSingle writes the single-file checkpoint into path (.gguf or .safetensors).
func (c SD3) WriteSingle(path string) error { return writeSingle(c, path) }

// WriteParts writes one file per component into dir as NAME-FLAG.EXT and returns the paths by flag.
func (c SD3) WriteParts(dir, name, ext string) (map[string]string, error) {
	return writeParts(c, SD3Parts, dir, name, sameExt(ext))
}

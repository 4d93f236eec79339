package synth

import (
	"fmt"
	"io"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/text"
)

// Wan is a Wan 2.1 (or, with V22, Wan 2.2 TI2V-5B) text-to-video model
// given by its exact widths and depths: the DiT under Wan-AI's names
// (its 5-D patch embedding), UMT5 (T5 with a bias table per layer, Hugging
// Face names) and the causal 3-D VAE (Wan-AI's names), with deterministic
// values and the UMT5 tokenizer in the GGUF metadata. It writes one file
// per component (for --diffusion-model, --t5xxl and --vae) or one file
// with sd.cpp's prefixes. sd.cpp fixes the DiT's widths by its block
// count (30 or 40 blocks), its RoPE needs 128-wide heads, and its VAE's
// widths are fixed (96), so WanParity keeps those.
type Wan struct {
	// Hidden is the DiT's width (a multiple of 128) and FF its feed-forward width.
	Hidden, FF int
	// Blocks is the DiT's block count.
	Blocks int
	// Channels is the latent width (16; 48 for TI2V-5B).
	Channels int
	// T5 is the text encoder (its Hidden is the DiT's text width, its
	// LayerBias set for UMT5); nil for a DiT conditioned on 4096-wide
	// tokens with no encoder (sd-cli's zero context).
	T5 *T5
	// VAEDec and VAEEnc are the VAE's decoder and encoder widths (Wan 2.1: 96 and 96).
	VAEDec, VAEEnc int
	// V22 selects Wan 2.2's VAE (48 channels, 2x2 pixel patches); Channels must be 48.
	V22 bool
	// Seed selects the values.
	Seed int64
	// Type is the float type of every tensor (F16 or F32); Quant, when not
	// 0, that of the DiT's 2-D linear weights whose rows are whole blocks.
	Type, Quant formats.DType
	// Width, Height and Steps are the generate defaults written in the metadata.
	Width, Height, Steps int
	// Fold writes the DiT's 5-D patch kernel in four dimensions, [dim·C,
	// 1, 2, 2], as sd.cpp holds a Conv3d and its GGUF reader needs (it
	// refuses tensors of more than four dimensions).
	Fold bool
}

// tinyUMT5 is TinyT5 with a bias table per layer, 64 wide.
var tinyUMT5 = func() T5 {
	t := TinyT5
	t.LayerBias = true
	return t
}()

// TinyWan is a Wan 2.1 model small enough for testdata: the DiT 128 wide
// (one head of 128), one block, a two-layer UMT5 64 wide, the VAE 8 wide,
// rendering 64x64 frames in 4 steps by default (under 3 MB).
var TinyWan = Wan{Hidden: 128, FF: 256, Blocks: 1, Channels: 16, T5: &tinyUMT5, VAEDec: 8, VAEEnc: 8,
	Seed: 6, Type: formats.F16, Quant: formats.Q8_0, Width: 64, Height: 64, Steps: 4}

// TinyWanTI2V is TinyWan with Wan 2.2 TI2V-5B's layout: 48 latent
// channels and Wan 2.2's VAE (2x2 pixel patches, 16 pixels per latent
// cell), 8 wide, for its text- and image-to-video in testdata.
var TinyWanTI2V = Wan{Hidden: 128, FF: 256, Blocks: 1, Channels: 48, T5: &tinyUMT5, VAEDec: 8, VAEEnc: 8, V22: true,
	Seed: 12, Type: formats.F16, Quant: formats.Q8_0, Width: 64, Height: 64, Steps: 4}

// WanParity is a Wan 2.1 1.3B model at full widths with the block count
// sd.cpp requires (30), no text encoder and the full Wan 2.1 VAE: sd-cli
// renders it with an empty prompt exactly as sdtool does (a 4096-wide
// zero context), for frame parity. About 1.5 GB with the DiT in q8_0.
var WanParity = Wan{Hidden: 1536, FF: 8960, Blocks: 30, Channels: 16, VAEDec: 96, VAEEnc: 96,
	Seed: 8, Type: formats.F16, Quant: formats.Q8_0, Width: 64, Height: 64, Steps: 2}

// WanTI2VParity is Wan 2.2 TI2V-5B at its real size, which sd.cpp
// requires of it (30 blocks 3072 wide, 24 heads of 128, FF 14336, 48
// latent channels), with no text encoder and Wan 2.2's VAE at its full
// widths (decoder 256, encoder 160): 4.9 B DiT parameters, about 2.8 GB
// with the DiT's matrices in q4_0 and 1.4 GB of F16 VAE.
var WanTI2VParity = Wan{Hidden: 3072, FF: 14336, Blocks: 30, Channels: 48, VAEDec: 256, VAEEnc: 160, V22: true,
	Seed: 10, Type: formats.F16, Quant: formats.Q4_0, Width: 64, Height: 64, Steps: 2}

// WanParts are the component flags Wan writes, in sd-cli's order.
var WanParts = []string{"diffusion-model", "t5xxl", "vae"}

// wanSinglePrefix is each component's prefix in a single file (sd.cpp's internal names).
var wanSinglePrefix = map[string]string{
	"diffusion-model": "model.diffusion_model.",
	"t5xxl":           "text_encoders.t5xxl.transformer.",
	"vae":             "first_stage_model.",
}

// textDim is the DiT's text token width.
func (c Wan) textDim() int {
	if c.T5 == nil {
		return 4096
	}
	return c.T5.Hidden
}

// Part lists the tensors of one component under its standalone file's names; nil for "t5xxl" without T5.
func (c Wan) Part(flag string) []TensorSpec {
	b := &builder{}
	switch flag {
	case "diffusion-model":
		wanConfig{Dim: c.Hidden, FFN: c.FF, Layers: c.Blocks, HeadDim: 128, In: c.Channels, Out: c.Channels,
			TextDim: c.textDim(), FreqDim: 256}.build(b)
		for i, t := range b.out {
			if c.Fold && len(t.Shape) == 5 {
				b.out[i].Shape = []int64{t.Shape[0] * t.Shape[1], t.Shape[2], t.Shape[3], t.Shape[4]}
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
		wanVAEConfig{Dec: c.VAEDec, Enc: c.VAEEnc, Z: c.Channels, V22: c.V22}.build(b)
	}
	return b.out
}

// typeOf is the stored type of a component's tensor.
func (c Wan) typeOf(flag string, t TensorSpec) formats.DType {
	if flag == "t5xxl" {
		return c.T5.typeOf(t)
	}
	if c.Quant != 0 && flag == "diffusion-model" && len(t.Shape) == 2 && t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	if len(t.Shape) == 3 { // the modulation tables, as the family table keeps them
		return formats.F32
	}
	return c.Type
}

// Metadata returns a component's metadata ("" for the single file): the
// generate defaults where the DiT is, the UMT5 tokenizer where UMT5 is.
func (c Wan) Metadata(flag string) formats.Metadata {
	u32 := func(k string, v int) formats.KV {
		return formats.KV{Key: k, Type: formats.TypeUint32, Value: uint32(v)}
	}
	str := func(k, v string) formats.KV { return formats.KV{Key: k, Type: formats.TypeString, Value: v} }
	md := formats.Metadata{str("general.name", "synthetic wan")}
	if flag == "" || flag == "diffusion-model" {
		md = append(md, str("general.architecture", "wan"),
			u32("sdtool.generate.width", c.Width), u32("sdtool.generate.height", c.Height), u32("sdtool.generate.steps", c.Steps))
	}
	if c.T5 != nil && (flag == "" || flag == "t5xxl") {
		if tok, err := c.T5.Tokenizer(); err == nil {
			md = text.EmbedUnigram(md, tok)
		}
	}
	return md
}

// EncodePart writes one component's file to w in format "gguf" or "safetensors".
func (c Wan) EncodePart(w io.Writer, format, flag string) error {
	ts := c.Part(flag)
	types := make([]formats.DType, len(ts))
	for i, t := range ts {
		types[i] = c.typeOf(flag, t)
	}
	return encodeSpecs(w, format, ts, nil, types, metadataFor(c.Metadata(flag), format), c.Seed)
}

// EncodeSingle writes every component into one file under sd.cpp's prefixes.
func (c Wan) EncodeSingle(w io.Writer, format string) error {
	return encodeSingle(w, format, c, WanParts, wanSinglePrefix, c.Seed)
}

// WriteParts writes one file per component into dir as NAME-FLAG.EXT and returns the paths by flag.
func (c Wan) WriteParts(dir, name, ext string) (map[string]string, error) {
	return writeParts(c, WanParts, dir, name, sameExt(ext))
}

// WriteSingle writes the single-file model into path (.gguf or .safetensors).
func (c Wan) WriteSingle(path string) error { return writeSingle(c, path) }

// wanVAEConfig describes Wan's causal 3-D VAE: decoder and encoder widths
// (levels ×4, ×4, ×2, ×1 up; ×1, ×2, ×4, ×4 down), Z latent channels,
// Wan 2.2's residual levels and 2x2 pixel patches with V22.
type wanVAEConfig struct {
	Dec, Enc, Z int
	V22         bool
}

// Which levels resample in time (Wan's temperal_upsample and temperal_downsample).
var (
	wanVAETimeUp   = []bool{true, true, false}
	wanVAETimeDown = []bool{false, true, true}
)

// build expands the VAE under Wan-AI's names (Conv3d kernels 5-D, RMS norm gammas [C, 1, 1, 1]).
func (c wanVAEConfig) build(b *builder) {
	w := wanVAEWriter{b}
	w.conv3("conv2", c.Z, c.Z, 1, 1)
	c.decoder(w)
	if c.Enc == 0 {
		return
	}
	c.encoder(w)
	w.conv3("conv1", 2*c.Z, 2*c.Z, 1, 1)
}

// wanVAEWriter adds the Wan VAE's repeated parts.
type wanVAEWriter struct{ b *builder }

func (w wanVAEWriter) conv3(p string, out, in, kt, k int) {
	w.b.add(p+".weight", InitWeight, out, in, kt, k, k)
	w.b.add(p+".bias", InitBias, out)
}

func (w wanVAEWriter) conv2(p string, out, in, k int) {
	w.b.add(p+".weight", InitWeight, out, in, k, k)
	w.b.add(p+".bias", InitBias, out)
}

// res adds a residual block (with a shortcut when the widths differ).
func (w wanVAEWriter) res(p string, in, out int) {
	w.b.add(p+"residual.0.gamma", InitOne, in, 1, 1, 1)
	w.conv3(p+"residual.2", out, in, 3, 3)
	w.b.add(p+"residual.3.gamma", InitOne, out, 1, 1, 1)
	w.conv3(p+"residual.6", out, out, 3, 3)
	if in != out {
		w.conv3(p+"shortcut", out, in, 1, 1)
	}
}

// mid adds the middle: a residual block, attention, a residual block.
func (w wanVAEWriter) mid(p string, ch int) {
	w.res(p+"middle.0.", ch, ch)
	w.b.add(p+"middle.1.norm.gamma", InitOne, ch, 1, 1)
	w.conv2(p+"middle.1.to_qkv", 3*ch, ch, 1)
	w.conv2(p+"middle.1.proj", ch, ch, 1)
	w.res(p+"middle.2.", ch, ch)
}

// decoder adds the decoder: Wan 2.2's upsamples are nested per level,
// Wan 2.1's numbered through.
func (c wanVAEConfig) decoder(w wanVAEWriter) {
	pix := 3
	if c.V22 {
		pix = 12
	}
	d := c.Dec
	dims := []int{4 * d, 4 * d, 4 * d, 2 * d, d}
	w.conv3("decoder.conv1", dims[0], c.Z, 3, 3)
	w.mid("decoder.", dims[0])
	idx := 0
	for i := 0; i < 4; i++ {
		in, out := dims[i], dims[i+1]
		if c.V22 {
			q := fmt.Sprintf("decoder.upsamples.%d.", i)
			for j := 0; j < 3; j++ {
				w.res(fmt.Sprintf("%supsamples.%d.", q, j), in, out)
				in = out
			}
			if i < 3 {
				w.conv2(q+"upsamples.3.resample.1", out, out, 3)
				if wanVAETimeUp[i] {
					w.conv3(q+"upsamples.3.time_conv", 2*out, out, 3, 1)
				}
			}
			continue
		}
		if i > 0 {
			in /= 2 // the previous level's spatial upsample halves the width
		}
		for j := 0; j < 3; j++ {
			w.res(fmt.Sprintf("decoder.upsamples.%d.", idx), in, out)
			in = out
			idx++
		}
		if i < 3 {
			q := fmt.Sprintf("decoder.upsamples.%d.", idx)
			w.conv2(q+"resample.1", out/2, out, 3)
			if wanVAETimeUp[i] {
				w.conv3(q+"time_conv", 2*out, out, 3, 1)
			}
			idx++
		}
	}
	w.b.add("decoder.head.0.gamma", InitOne, dims[4], 1, 1, 1)
	w.conv3("decoder.head.2", pix, dims[4], 3, 3)
}

// encoder adds the encoder, its downsamples nested per level in Wan 2.2.
func (c wanVAEConfig) encoder(w wanVAEWriter) {
	pix := 3
	if c.V22 {
		pix = 12
	}
	e := c.Enc
	edims := []int{e, e, 2 * e, 4 * e, 4 * e}
	w.conv3("encoder.conv1", e, pix, 3, 3)
	idx := 0
	for i := 0; i < 4; i++ {
		in, out := edims[i], edims[i+1]
		q := "encoder."
		if c.V22 {
			q = fmt.Sprintf("encoder.downsamples.%d.", i)
			idx = 0
		}
		for j := 0; j < 2; j++ {
			w.res(fmt.Sprintf("%sdownsamples.%d.", q, idx), in, out)
			in = out
			idx++
		}
		if i < 3 {
			rq := fmt.Sprintf("%sdownsamples.%d.", q, idx)
			w.conv2(rq+"resample.1", out, out, 3)
			if wanVAETimeDown[i] {
				w.conv3(rq+"time_conv", out, out, 3, 1)
			}
			idx++
		}
	}
	w.mid("encoder.", edims[4])
	w.b.add("encoder.head.0.gamma", InitOne, edims[4], 1, 1, 1)
	w.conv3("encoder.head.2", 2*c.Z, edims[4], 3, 3)
}

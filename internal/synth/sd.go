package synth

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
)

// SD is a Stable Diffusion 1.x/2.x/XL checkpoint that sdtool generate can
// run in seconds, given by its exact widths and depths (where Spec scales a
// real architecture): every tensor of the SD1 (or SD2, SDXL) layout under
// its original names, built by the same UNet, VAE and CLIP builders as Spec,
// the same deterministic values, a CLIP tokenizer for a short word list
// embedded in the metadata, and the metadata overrides that shape detection
// cannot infer (head counts, default image size and steps).
// testdata/tiny-sd1.gguf and testdata/tiny-sd1.safetensors are TinySD and
// testdata/tiny-sdxl.gguf TinySDXL; quality tests use wider variants with
// quantized linear weights.
type SD struct {
	// ModelChannels, Mult, NumRes, Depth and MiddleDepth shape the UNet as in LDM's config.
	ModelChannels int
	Mult          []int
	NumRes        int
	Depth         []int
	MiddleDepth   int
	// UNetHeads is the UNet's head count (written as sdtool.unet.num_heads).
	UNetHeads int
	// TextHidden, TextFF, TextLayers and TextHeads shape the CLIP text model.
	TextHidden, TextFF, TextLayers, TextHeads int
	// VAECh and VAEMult shape the VAE (len(VAEMult) levels, 2 residual blocks each).
	VAECh   int
	VAEMult []int
	// Words are the prompt words the embedded tokenizer knows whole.
	Words []string
	// Seed selects the values.
	Seed int64
	// Type is the float type of every tensor (F16 or F32).
	Type formats.DType
	// Quant, when not 0, is the type of the 2-D linear weights whose rows
	// are whole blocks of it (the embeddings stay in Type).
	Quant formats.DType
	// Width, Height and Steps are the generate defaults written in the metadata.
	Width, Height, Steps int
	// SD2 selects SD 2.x's layout: linear proj_in/proj_out and an OpenCLIP
	// text model (cond_stage_model.model., fused in_proj), no prediction
	// metadata (generate then probes the UNet as sd.cpp does).
	SD2 bool
	// SDXL selects SDXL's single-file layout: linear projections, CLIP-L
	// (conditioner.embedders.0.transformer.text_model.) and an OpenCLIP
	// bigG (conditioner.embedders.1.model., with text_projection) shaped by
	// G, whose hidden states are concatenated into the UNet's context, and
	// label_emb over the pooled bigG output and six 256-wide size embeddings.
	SDXL bool
	// G shapes SDXL's second text model (its Heads written as sdtool.clip_g.num_heads).
	G TextModel
	// Refiner, with SDXL, selects the SDXL refiner's layout: bigG alone
	// (conditioner.embedders.0.model.), the context G.Hidden wide, and
	// label_emb over the pooled output, four size embeddings and the
	// aesthetic score's (each 256 wide).
	Refiner bool
}

// TextModel shapes a CLIP text model.
type TextModel struct {
	Hidden, FF, Layers, Heads int
}

// TinySDXL is testdata/tiny-sdxl.gguf: SDXL's layout with a 32-wide UNet
// over three levels (attention on the last two, one block each), a 64-wide
// CLIP-L and a 64-wide bigG of two layers each (the penultimate one
// conditions), and a 32-wide VAE, f16 (under 3 MB), with 128x128 images in 4
// steps by default.
var TinySDXL = SD{
	ModelChannels: 32, Mult: []int{1, 1, 1}, NumRes: 1, Depth: []int{0, 1, 1}, MiddleDepth: 1, UNetHeads: 2,
	TextHidden: 64, TextFF: 64, TextLayers: 2, TextHeads: 2,
	G:     TextModel{Hidden: 64, FF: 64, Layers: 2, Heads: 2},
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Words: DefaultWords, Seed: 2, Type: formats.F16, Width: 128, Height: 128, Steps: 4, SDXL: true,
}

// TinySD is testdata/tiny-sd1.gguf and testdata/tiny-sd1.safetensors: a 32-wide UNet over four levels (two
// residual blocks each, attention on the first three), a 64-wide two-layer
// CLIP and a 32-wide VAE, f16 (about 3.6 MB), with 128x128 images in 4
// steps by default.
var TinySD = SD{
	ModelChannels: 32, Mult: []int{1, 1, 1, 1}, NumRes: 2, Depth: []int{1, 1, 1, 0}, MiddleDepth: 1, UNetHeads: 8,
	TextHidden: 64, TextFF: 256, TextLayers: 2, TextHeads: 2,
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Words: DefaultWords, Seed: 1, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
}

// FullSD15 has the full Stable Diffusion 1.5 widths and depths (UNet 320
// channels, CLIP-L 768 wide with 12 layers, VAE 128) for benchmarks; only
// the vocabulary is small. It is about 1.07 billion parameters.
var FullSD15 = SD{
	ModelChannels: 320, Mult: []int{1, 2, 4, 4}, NumRes: 2, Depth: []int{1, 1, 1, 0}, MiddleDepth: 1, UNetHeads: 8,
	TextHidden: 768, TextFF: 3072, TextLayers: 12, TextHeads: 12,
	VAECh: 128, VAEMult: []int{1, 2, 4, 4},
	Words: DefaultWords, Seed: 1, Type: formats.F16, Width: 512, Height: 512, Steps: 20,
}

// DefaultWords are the words TinySD's tokenizer merges whole.
var DefaultWords = []string{
	"a", "an", "the", "of", "in", "on", "with", "and", "cat", "dog", "photo", "painting", "portrait",
	"astronaut", "riding", "horse", "red", "blue", "green", "house", "tree", "mountain", "lake", "city",
	"night", "sunset", "beautiful", "detailed", "blurry", "ugly", "lowres", "oil", "sky", "castle",
}

// Merges builds CLIP-style BPE merges that spell each word left to right
// ("c a", "ca t</w>"), skipping repeats, so the tokenizer maps each word
// to one token.
func Merges(words []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range words {
		if len(w) < 2 {
			continue
		}
		cur := w[:1]
		for i := 1; i < len(w); i++ {
			next := w[i : i+1]
			if i == len(w)-1 {
				next += "</w>"
			}
			m := cur + " " + next
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
			cur += next
		}
	}
	return out
}

// Vocab returns the size of the tokenizer's vocabulary: 512 byte symbols,
// one token per merge, BOS and EOS.
func (c SD) Vocab() int { return 512 + len(Merges(c.Words)) + 2 }

// Tensors lists the model's tensors in file order.
func (c SD) Tensors() []TensorSpec {
	unet := scaledUNet{unetConfig: unetConfig{
		InChannels: 4, OutChannels: 4, ModelChannels: c.ModelChannels, Mult: c.Mult, NumRes: c.NumRes,
		Depth: c.Depth, MiddleDepth: c.MiddleDepth, LinearProj: c.SD2 || c.SDXL,
	}, ctx: c.TextHidden}
	vae := vaeConfig{Ch: c.VAECh, InCh: 3, ZCh: 4, Mult: c.VAEMult, NumRes: 2}
	// SD 1.x checkpoints carry CLIP's I64 position_ids buffer (sd.cpp drops it).
	text := clipConfig{Hidden: c.TextHidden, FF: c.TextFF, Layers: c.TextLayers, Vocab: c.Vocab(), Positions: 77, PositionIDs: !c.SD2}
	parts := []component{
		{"model.diffusion_model.", "diffusion", unet.build},
		{"first_stage_model.", "vae", vae.build},
		{"cond_stage_model.transformer.text_model.", "text", text.buildHF},
	}
	switch {
	case c.SDXL:
		g := clipConfig{Hidden: c.G.Hidden, FF: c.G.FF, Layers: c.G.Layers, Vocab: c.Vocab(), Positions: 77, Projection: true}
		unet.ctx = c.TextHidden + c.G.Hidden
		unet.ADMIn = c.G.Hidden + 6*256 // the pooled bigG output and six 256-wide size embeddings
		parts[0] = component{"model.diffusion_model.", "diffusion", unet.build}
		parts[2] = component{"conditioner.embedders.0.transformer.text_model.", "text", text.buildHF}
		parts = append(parts, component{"conditioner.embedders.1.model.", "text", g.buildOpenCLIP})
		if c.Refiner {
			unet.ctx = c.G.Hidden
			unet.ADMIn = c.G.Hidden + 5*256
			parts[0] = component{"model.diffusion_model.", "diffusion", unet.build}
			parts = []component{parts[0], parts[1], {"conditioner.embedders.0.model.", "text", g.buildOpenCLIP}}
		}
	case c.SD2:
		parts[2] = component{"cond_stage_model.model.", "text", text.buildOpenCLIP}
	}
	var out []TensorSpec
	for _, p := range parts {
		b := &builder{prefix: p.prefix}
		p.build(b)
		out = append(out, b.out...)
	}
	return out
}

// typeOf is the stored type of a tensor.
func (c SD) typeOf(t TensorSpec) formats.DType {
	if t.Init == InitIndex {
		return formats.I64
	}
	if c.Quant != 0 && len(t.Shape) == 2 && !strings.Contains(t.Name, "embedding") &&
		t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	return c.Type
}

// Metadata returns the GGUF metadata: architecture, the tokenizer merges,
// head counts and generate defaults.
func (c SD) Metadata() formats.Metadata {
	u32 := func(k string, v int) formats.KV {
		return formats.KV{Key: k, Type: formats.TypeUint32, Value: uint32(v)}
	}
	str := func(k, v string) formats.KV { return formats.KV{Key: k, Type: formats.TypeString, Value: v} }
	arch, act := "sd1", "quick_gelu"
	switch {
	case c.SDXL:
		arch = "sdxl"
	case c.SD2:
		arch, act = "sd2", "gelu"
	}
	md := formats.Metadata{
		str("general.architecture", arch),
		str("general.name", "tiny synthetic "+arch),
		// infer.MetadataMergesKey; spelled out because internal packages do not import infer.
		str("sdtool.tokenizer.clip.merges", "#version: 0.2\n"+strings.Join(Merges(c.Words), "\n")),
		u32("sdtool.unet.num_heads", c.UNetHeads),
		u32("sdtool.clip.num_heads", c.TextHeads),
		str("sdtool.clip.hidden_act", act),
		u32("sdtool.generate.width", c.Width),
		u32("sdtool.generate.height", c.Height),
		u32("sdtool.generate.steps", c.Steps),
	}
	if c.SDXL {
		md = append(md, u32("sdtool.clip_g.num_heads", c.G.Heads))
	}
	if !c.SD2 {
		md = append(md, str("sdtool.prediction", "eps"))
	}
	return md
}

// Encode writes the model as GGUF to w.
func (c SD) Encode(w io.Writer) error { return c.EncodeAs(w, "gguf") }

// EncodeAs writes the model to w in format "gguf" or "safetensors": the
// same tensors and values either way, and the same metadata (as strings in
// safetensors' __metadata__, where infer reads numbers from their text).
func (c SD) EncodeAs(w io.Writer, format string) error {
	ts := c.Tensors()
	types := make([]formats.DType, len(ts))
	for i, t := range ts {
		types[i] = c.typeOf(t)
	}
	return encodeSpecs(w, format, ts, nil, types, c.Metadata(), c.Seed)
}

// encodeSpecs writes tensors ts, stored as types, with metadata md, in
// format "gguf" or "safetensors" (metadata as strings there), their values
// drawn for seed and their names (which seed each one's values); names,
// when not nil, renames them in the file (a prefix that leaves the values
// as the standalone file has them).
func encodeSpecs(w io.Writer, format string, ts []TensorSpec, names []string, types []formats.DType, md formats.Metadata, seed int64) error {
	desc := make([]formats.Tensor, len(ts))
	for i, t := range ts {
		desc[i] = formats.Tensor{Name: t.Name, Type: types[i], Shape: t.Shape}
		if names != nil {
			desc[i].Name = names[i]
		}
	}
	var tw formats.TensorWriter
	var err error
	switch format {
	case "gguf":
		tw, err = gguf.NewWriter(w, desc, md, nil)
	case "safetensors":
		smd, _ := pipeline.CarryMetadata(md, "safetensors")
		cr, ok := formats.CreatorNamed("safetensors")
		if !ok {
			return errors.New("synth: the safetensors writer is not linked in")
		}
		for i := range desc {
			if desc[i].Size, err = desc[i].Type.Bytes(desc[i].Shape); err != nil {
				return fmt.Errorf("tensor %q: %w", desc[i].Name, err)
			}
		}
		tw, err = cr.New(w, desc, formats.WriteOptions{Metadata: smd})
	default:
		return fmt.Errorf("synth: unknown output format %q", format)
	}
	if err != nil {
		return err
	}
	spec := Spec{Seed: seed, DType: formats.F32}
	for i, t := range ts {
		if t.Init == InitIndex {
			t.Type = formats.I64
			if _, err := io.Copy(tw, Data(spec, t)); err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			continue
		}
		t.Type = formats.F32
		n, _ := formats.Elements(t.Shape)
		typ := desc[i].Type
		enc, err := quant.Encoder(typ)
		if err != nil {
			return err
		}
		row := t.Shape[len(t.Shape)-1]
		rb, err := typ.RowBytes(row)
		if err != nil {
			return err
		}
		// Rows in bounded batches, so that a full-width tensor never sits whole in memory.
		r := Data(spec, t)
		rows := n / row
		batch := max(1, (4<<20)/row)
		raw := make([]byte, 4*row*min(batch, rows))
		f := make([]float32, row*min(batch, rows))
		out := make([]byte, rb*min(batch, rows))
		for done := int64(0); done < rows; done += batch {
			k := min(batch, rows-done)
			if _, err := io.ReadFull(r, raw[:4*row*k]); err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			for j := range f[:row*k] {
				f[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
			}
			for q := int64(0); q < k; q++ {
				enc.Quantize(out[q*rb:(q+1)*rb], f[q*row:(q+1)*row], nil)
			}
			if _, err := tw.Write(out[:rb*k]); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// Write generates the model into path, in the format its extension
// chooses (.gguf or .safetensors), through the pipeline's atomic publish.
// It replaces an existing file: callers that must not (gensynth) check first.
func (c SD) Write(path string) error {
	cr, err := formats.CreatorFor(path)
	if err != nil {
		return err
	}
	return pipeline.WriteAtomic(context.Background(), path, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
		return c.EncodeAs(w, cr.Name)
	})
}

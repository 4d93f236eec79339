// Package tinysd generates small Stable Diffusion checkpoints that sdtool
// generate can run in seconds: every tensor of the SD1, SD2 or SDXL layout
// (LDM UNet, VAE and the CLIP text models with their original names) at a
// chosen width and depth, deterministic pseudo-random values from package
// synth, a CLIP tokenizer built from a short word list embedded in the
// metadata, and the metadata overrides that shape detection cannot infer
// (head counts, default image size and steps). testdata/tiny-sd1.gguf is
// Tiny and testdata/tiny-sdxl.gguf TinySDXL; quality tests generate wider
// variants with quantized linear weights.
package tinysd

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/quant"
)

// Config describes a tiny SD1-architecture model.
type Config struct {
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
	// bigG (conditioner.embedders.1.model., with text_projection) of
	// G.Hidden, G.FF, G.Layers and G.Heads, whose hidden states are
	// concatenated into the UNet's context, and label_emb over the pooled
	// bigG output and six 256-wide size embeddings.
	SDXL bool
	// G shapes SDXL's second text model.
	G TextModel
}

// TextModel shapes a CLIP text model.
type TextModel struct {
	Hidden, FF, Layers, Heads int
}

// TinySDXL is testdata/tiny-sdxl.gguf's configuration: SDXL's layout with
// a 32-wide UNet over three levels (attention on the last two, one block
// each), a 64-wide CLIP-L and a 64-wide bigG of two layers each (the
// penultimate one conditions), and a 32-wide VAE, f16 (under 3 MB), with
// 128x128 images in 4 steps by default.
var TinySDXL = Config{
	ModelChannels: 32, Mult: []int{1, 1, 1}, NumRes: 1, Depth: []int{0, 1, 1}, MiddleDepth: 1, UNetHeads: 2,
	TextHidden: 64, TextFF: 64, TextLayers: 2, TextHeads: 2,
	G:     TextModel{Hidden: 64, FF: 64, Layers: 2, Heads: 2},
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Words: DefaultWords, Seed: 2, Type: formats.F16, Width: 128, Height: 128, Steps: 4, SDXL: true,
}

// contextDim is the width of the UNet's cross-attention context.
func (c Config) contextDim() int {
	if c.SDXL {
		return c.TextHidden + c.G.Hidden
	}
	return c.TextHidden
}

// sdxlSizeDim is the width of each size number's embedding in SDXL's conditioning vector.
const sdxlSizeDim = 256

// Tiny is testdata/tiny-sd1.gguf's configuration: a 32-wide UNet over
// four levels (two residual blocks each, attention on the first three), a
// 64-wide two-layer CLIP and a 32-wide VAE, f16 (about 3.6 MB), with
// 128x128 images in 4 steps by default.
var Tiny = Config{
	ModelChannels: 32, Mult: []int{1, 1, 1, 1}, NumRes: 2, Depth: []int{1, 1, 1, 0}, MiddleDepth: 1, UNetHeads: 8,
	TextHidden: 64, TextFF: 256, TextLayers: 2, TextHeads: 2,
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Words: DefaultWords, Seed: 1, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
}

// SD15 has the full Stable Diffusion 1.5 widths and depths (UNet 320
// channels, CLIP-L 768 wide with 12 layers, VAE 128) for benchmarks; only
// the vocabulary is small. It is about 1.07 billion parameters.
var SD15 = Config{
	ModelChannels: 320, Mult: []int{1, 2, 4, 4}, NumRes: 2, Depth: []int{1, 1, 1, 0}, MiddleDepth: 1, UNetHeads: 8,
	TextHidden: 768, TextFF: 3072, TextLayers: 12, TextHeads: 12,
	VAECh: 128, VAEMult: []int{1, 2, 4, 4},
	Words: DefaultWords, Seed: 1, Type: formats.F16, Width: 512, Height: 512, Steps: 20,
}

// DefaultWords are the words Tiny's tokenizer merges whole.
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
func (c Config) Vocab() int { return 512 + len(Merges(c.Words)) + 2 }

type builder struct{ out []synth.TensorSpec }

func (b *builder) add(name string, init synth.Init, shape ...int) {
	s := make([]int64, len(shape))
	for i, d := range shape {
		s[i] = int64(d)
	}
	b.out = append(b.out, synth.TensorSpec{Name: name, Shape: s, Init: init})
}

func (b *builder) linear(name string, out, in int, bias bool) {
	b.add(name+".weight", synth.InitWeight, out, in)
	if bias {
		b.add(name+".bias", synth.InitBias, out)
	}
}

func (b *builder) conv(name string, out, in, k int) {
	b.add(name+".weight", synth.InitWeight, out, in, k, k)
	b.add(name+".bias", synth.InitBias, out)
}

func (b *builder) norm(name string, n int) {
	b.add(name+".weight", synth.InitOne, n)
	b.add(name+".bias", synth.InitBias, n)
}

// Tensors lists the model's tensors in file order.
func (c Config) Tensors() []synth.TensorSpec {
	b := &builder{}
	c.unet(b, "model.diffusion_model.")
	c.vae(b, "first_stage_model.")
	l := TextModel{Hidden: c.TextHidden, FF: c.TextFF, Layers: c.TextLayers}
	switch {
	case c.SDXL:
		clip(b, "conditioner.embedders.0.transformer.text_model.", l, c.Vocab())
		openCLIP(b, "conditioner.embedders.1.model.", c.G, c.Vocab())
	case c.SD2:
		openCLIP(b, "cond_stage_model.model.", l, c.Vocab())
	default:
		clip(b, "cond_stage_model.transformer.text_model.", l, c.Vocab())
	}
	return b.out
}

func (c Config) unet(b *builder, p string) {
	mc := c.ModelChannels
	temb := 4 * mc
	b.linear(p+"time_embed.0", temb, mc, true)
	b.linear(p+"time_embed.2", temb, temb, true)
	if c.SDXL {
		b.linear(p+"label_emb.0.0", temb, c.G.Hidden+6*sdxlSizeDim, true)
		b.linear(p+"label_emb.0.2", temb, temb, true)
	}
	linear := c.SD2 || c.SDXL
	b.conv(p+"input_blocks.0.0", mc, 4, 3)
	res := func(q string, in, out int) {
		b.norm(q+".in_layers.0", in)
		b.conv(q+".in_layers.2", out, in, 3)
		b.linear(q+".emb_layers.1", out, temb, true)
		b.norm(q+".out_layers.0", out)
		b.conv(q+".out_layers.3", out, out, 3)
		if in != out {
			b.conv(q+".skip_connection", out, in, 1)
		}
	}
	tr := func(q string, ch, depth int) {
		b.norm(q+".norm", ch)
		if linear {
			b.linear(q+".proj_in", ch, ch, true)
		} else {
			b.conv(q+".proj_in", ch, ch, 1)
		}
		for d := 0; d < depth; d++ {
			t := q + ".transformer_blocks." + strconv.Itoa(d)
			for _, a := range []struct {
				name string
				kv   int
			}{{"attn1", ch}, {"attn2", c.contextDim()}} {
				b.linear(t+"."+a.name+".to_q", ch, ch, false)
				b.linear(t+"."+a.name+".to_k", ch, a.kv, false)
				b.linear(t+"."+a.name+".to_v", ch, a.kv, false)
				b.linear(t+"."+a.name+".to_out.0", ch, ch, true)
			}
			b.linear(t+".ff.net.0.proj", 8*ch, ch, true)
			b.linear(t+".ff.net.2", ch, 4*ch, true)
			b.norm(t+".norm1", ch)
			b.norm(t+".norm2", ch)
			b.norm(t+".norm3", ch)
		}
		if linear {
			b.linear(q+".proj_out", ch, ch, true)
		} else {
			b.conv(q+".proj_out", ch, ch, 1)
		}
	}
	itoa := strconv.Itoa
	chans := []int{mc}
	ch, idx := mc, 1
	for level, m := range c.Mult {
		for i := 0; i < c.NumRes; i++ {
			q := p + "input_blocks." + itoa(idx)
			res(q+".0", ch, m*mc)
			ch = m * mc
			if c.Depth[level] > 0 {
				tr(q+".1", ch, c.Depth[level])
			}
			chans = append(chans, ch)
			idx++
		}
		if level != len(c.Mult)-1 {
			b.conv(p+"input_blocks."+itoa(idx)+".0.op", ch, ch, 3)
			chans = append(chans, ch)
			idx++
		}
	}
	res(p+"middle_block.0", ch, ch)
	tr(p+"middle_block.1", ch, c.MiddleDepth)
	res(p+"middle_block.2", ch, ch)
	idx = 0
	for level := len(c.Mult) - 1; level >= 0; level-- {
		for i := 0; i <= c.NumRes; i++ {
			skip := chans[len(chans)-1]
			chans = chans[:len(chans)-1]
			q := p + "output_blocks." + itoa(idx)
			out := c.Mult[level] * mc
			res(q+".0", ch+skip, out)
			ch = out
			sub := 1
			if c.Depth[level] > 0 {
				tr(q+".1", ch, c.Depth[level])
				sub = 2
			}
			if level > 0 && i == c.NumRes {
				b.conv(q+"."+itoa(sub)+".conv", ch, ch, 3)
			}
			idx++
		}
	}
	b.norm(p+"out.0", ch)
	b.conv(p+"out.2", 4, ch, 3)
}

func (c Config) vae(b *builder, p string) {
	itoa := strconv.Itoa
	res := func(q string, in, out int) {
		b.norm(q+".norm1", in)
		b.conv(q+".conv1", out, in, 3)
		b.norm(q+".norm2", out)
		b.conv(q+".conv2", out, out, 3)
		if in != out {
			b.conv(q+".nin_shortcut", out, in, 1)
		}
	}
	mid := func(q string, ch int) {
		res(q+".mid.block_1", ch, ch)
		b.norm(q+".mid.attn_1.norm", ch)
		for _, n := range []string{"q", "k", "v", "proj_out"} {
			b.conv(q+".mid.attn_1."+n, ch, ch, 1)
		}
		res(q+".mid.block_2", ch, ch)
	}
	b.conv(p+"encoder.conv_in", c.VAECh, 3, 3)
	ch := c.VAECh
	for level, m := range c.VAEMult {
		for i := 0; i < 2; i++ {
			res(p+"encoder.down."+itoa(level)+".block."+itoa(i), ch, m*c.VAECh)
			ch = m * c.VAECh
		}
		if level != len(c.VAEMult)-1 {
			b.conv(p+"encoder.down."+itoa(level)+".downsample.conv", ch, ch, 3)
		}
	}
	mid(p+"encoder", ch)
	b.norm(p+"encoder.norm_out", ch)
	b.conv(p+"encoder.conv_out", 8, ch, 3)
	ch = c.VAECh * c.VAEMult[len(c.VAEMult)-1]
	b.conv(p+"decoder.conv_in", ch, 4, 3)
	mid(p+"decoder", ch)
	for level := len(c.VAEMult) - 1; level >= 0; level-- {
		out := c.VAEMult[level] * c.VAECh
		for i := 0; i <= 2; i++ {
			res(p+"decoder.up."+itoa(level)+".block."+itoa(i), ch, out)
			ch = out
		}
		if level != 0 {
			b.conv(p+"decoder.up."+itoa(level)+".upsample.conv", ch, ch, 3)
		}
	}
	b.norm(p+"decoder.norm_out", ch)
	b.conv(p+"decoder.conv_out", 3, ch, 3)
	b.conv(p+"quant_conv", 8, 8, 1)
	b.conv(p+"post_quant_conv", 4, 4, 1)
}

func clip(b *builder, p string, m TextModel, vocab int) {
	h := m.Hidden
	b.add(p+"embeddings.token_embedding.weight", synth.InitWeight, vocab, h)
	b.add(p+"embeddings.position_embedding.weight", synth.InitWeight, 77, h)
	for l := 0; l < m.Layers; l++ {
		q := p + "encoder.layers." + strconv.Itoa(l)
		for _, n := range []string{"k_proj", "v_proj", "q_proj", "out_proj"} {
			b.linear(q+".self_attn."+n, h, h, true)
		}
		b.norm(q+".layer_norm1", h)
		b.linear(q+".mlp.fc1", m.FF, h, true)
		b.linear(q+".mlp.fc2", h, m.FF, true)
		b.norm(q+".layer_norm2", h)
	}
	b.norm(p+"final_layer_norm", h)
}

func openCLIP(b *builder, p string, m TextModel, vocab int) {
	h := m.Hidden
	b.add(p+"positional_embedding", synth.InitWeight, 77, h)
	b.add(p+"token_embedding.weight", synth.InitWeight, vocab, h)
	for l := 0; l < m.Layers; l++ {
		q := p + "transformer.resblocks." + strconv.Itoa(l)
		b.norm(q+".ln_1", h)
		b.add(q+".attn.in_proj_weight", synth.InitWeight, 3*h, h)
		b.add(q+".attn.in_proj_bias", synth.InitBias, 3*h)
		b.linear(q+".attn.out_proj", h, h, true)
		b.norm(q+".ln_2", h)
		b.linear(q+".mlp.c_fc", m.FF, h, true)
		b.linear(q+".mlp.c_proj", h, m.FF, true)
	}
	b.norm(p+"ln_final", h)
	b.add(p+"text_projection", synth.InitWeight, h, h)
}

// typeOf is the stored type of a tensor.
func (c Config) typeOf(t synth.TensorSpec) formats.DType {
	if c.Quant != 0 && len(t.Shape) == 2 && !strings.Contains(t.Name, "embedding") &&
		t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	return c.Type
}

// Metadata returns the GGUF metadata: architecture, the tokenizer merges,
// head counts and generate defaults.
func (c Config) Metadata() formats.Metadata {
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
func (c Config) Encode(w io.Writer) error {
	ts := c.Tensors()
	desc := make([]formats.Tensor, len(ts))
	for i, t := range ts {
		desc[i] = formats.Tensor{Name: t.Name, Type: c.typeOf(t), Shape: t.Shape}
	}
	tw, err := gguf.NewWriter(w, desc, c.Metadata(), nil)
	if err != nil {
		return err
	}
	spec := synth.Spec{Seed: c.Seed, DType: formats.F32}
	for i, t := range ts {
		t.Type = formats.F32
		n, _ := formats.Elements(t.Shape)
		raw := make([]byte, 4*n)
		if _, err := io.ReadFull(synth.Data(spec, t), raw); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		f := make([]float32, n)
		for j := range f {
			f[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
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
		out := make([]byte, rb*(n/row))
		for r := int64(0); r < n/row; r++ {
			enc.Quantize(out[r*rb:(r+1)*rb], f[r*row:(r+1)*row], nil)
		}
		if _, err := tw.Write(out); err != nil {
			return err
		}
	}
	return tw.Close()
}

// Write generates the model into path (through path+".partial").
func (c Config) Write(path string) (err error) {
	f, err := os.Create(path + ".partial")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path + ".partial")
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := c.Encode(bw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(path+".partial", path)
}

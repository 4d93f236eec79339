package synth

import (
	"fmt"
	"math"
	"sort"
	"strconv"
)

// The architectures are described as data (the config structs below, one
// value per architecture) and expanded by a few generic builders: an LDM
// UNet, an LDM VAE, a Hugging Face CLIP text model, an OpenCLIP text model
// and the Flux and Wan DiTs. Real widths are written out; Spec.Scale and
// Spec.Depth shrink them at expansion time.

// unetConfig describes an LDM (CompVis / SGM) UNet.
type unetConfig struct {
	InChannels, OutChannels int
	ModelChannels           int
	Mult                    []int
	NumRes                  int
	// Depth is the transformer depth per level; 0 means no attention there.
	Depth []int
	// MiddleDepth is the transformer depth of the middle block.
	MiddleDepth int
	// LinearProj selects linear proj_in/proj_out (SD2, SDXL) instead of 1x1 convs (SD1).
	LinearProj bool
	// ADMIn is the input width of label_emb (SDXL); 0 when there is none.
	ADMIn int
}

// vaeConfig describes an LDM AutoencoderKL.
type vaeConfig struct {
	Ch, InCh, ZCh int
	Mult          []int
	NumRes        int
	// NoQuantConv leaves out quant_conv and post_quant_conv (Flux's VAE).
	NoQuantConv bool
	// DecCh, when not 0, is the decoder's width in place of Ch (sd.cpp
	// reads the decoder's from the weights and fixes the encoder's).
	DecCh int
}

// clipConfig describes a CLIP text transformer.
type clipConfig struct {
	Hidden, FF, Layers, Vocab, Positions int
	// Projection adds text_projection (CLIP-G).
	Projection bool
	// PositionIDs adds the I64 embeddings.position_ids buffer that SD1 checkpoints carry.
	PositionIDs bool
	// LogitScale adds OpenCLIP's logit_scale (SDXL's CLIP-G carries it).
	LogitScale bool
}

// fluxConfig describes the Flux MMDiT.
type fluxConfig struct {
	Hidden, HeadDim, MLP, Double, Single int
	In, VecIn, ContextIn, TimeIn         int
	Guidance                             bool
	// ApproxInner, when not 0, makes it Chroma: no time, guidance, vector
	// or modulation layers, an approximator ApproxInner wide with
	// ApproxLayers residual layers instead.
	ApproxInner, ApproxLayers int
}

// wanConfig describes the Wan 2.x video DiT.
type wanConfig struct {
	Dim, FFN, Layers, HeadDim, In, Out, TextDim, FreqDim int
}

// t5Config describes a T5 v1.1 encoder (T5EncoderModel naming).
type t5Config struct {
	Model, FF, Layers, Vocab, Heads, Buckets int
}

var t5xxl = t5Config{Model: 4096, FF: 10240, Layers: 24, Vocab: 32128, Heads: 64, Buckets: 32}

// component is one part of a checkpoint: a name prefix and a builder.
type component struct {
	prefix string
	// kind selects which of Spec's scales applies: "diffusion", "text" or "vae".
	kind  string
	build func(b *builder)
}

// archDef is one row of the architecture table.
type archDef struct {
	doc   string
	parts func(s scaler) []component
}

var sd1UNet = unetConfig{
	InChannels: 4, OutChannels: 4, ModelChannels: 320, Mult: []int{1, 2, 4, 4}, NumRes: 2,
	Depth: []int{1, 1, 1, 0}, MiddleDepth: 1,
}

var sd1VAE = vaeConfig{Ch: 128, InCh: 3, ZCh: 4, Mult: []int{1, 2, 4, 4}, NumRes: 2}

var clipL = clipConfig{Hidden: 768, FF: 3072, Layers: 12, Vocab: 49408, Positions: 77}

var sdxlUNet = unetConfig{
	InChannels: 4, OutChannels: 4, ModelChannels: 320, Mult: []int{1, 2, 4}, NumRes: 2,
	Depth: []int{0, 2, 10}, MiddleDepth: 10, LinearProj: true, ADMIn: 2816,
}

var clipG = clipConfig{Hidden: 1280, FF: 5120, Layers: 32, Vocab: 49408, Positions: 77, Projection: true, LogitScale: true}

var fluxDev = fluxConfig{
	Hidden: 3072, HeadDim: 128, MLP: 12288, Double: 19, Single: 38,
	In: 64, VecIn: 768, ContextIn: 4096, TimeIn: 256, Guidance: true,
}

var wan13B = wanConfig{Dim: 1536, FFN: 8960, Layers: 30, HeadDim: 128, In: 16, Out: 16, TextDim: 4096, FreqDim: 256}

// archs is the architecture table.
var archs = map[string]archDef{
	"sd1": {
		doc: "Stable Diffusion 1.x checkpoint: LDM UNet, VAE and CLIP-L with their original prefixes",
		parts: func(s scaler) []component {
			text := s.clip(clipL, "text")
			text.PositionIDs = true
			unet := s.unet(sd1UNet)
			unet.ctx = text.Hidden
			return []component{
				{"model.diffusion_model.", "diffusion", unet.build},
				{"first_stage_model.", "vae", s.vae(sd1VAE).build},
				{"cond_stage_model.transformer.text_model.", "text", text.buildHF},
			}
		},
	},
	"sdxl": {
		doc: "SDXL base checkpoint: UNet with label_emb, VAE, CLIP-L and OpenCLIP bigG (conditioner.embedders.N.)",
		parts: func(s scaler) []component {
			l, g := s.clip(clipL, "text"), s.clip(clipG, "text")
			unet := s.unet(sdxlUNet)
			unet.ctx = l.Hidden + g.Hidden
			// The ADM input is the pooled CLIP-G output plus six 256-wide
			// size embeddings; 256 is fixed by the conditioner (it is not a
			// learned width), so it is not scaled and scaled models still run.
			unet.ADMIn = g.Hidden + 6*256
			return []component{
				{"model.diffusion_model.", "diffusion", unet.build},
				{"first_stage_model.", "vae", s.vae(sd1VAE).build},
				{"conditioner.embedders.0.transformer.text_model.", "text", l.buildHF},
				{"conditioner.embedders.1.model.", "text", g.buildOpenCLIP},
			}
		},
	},
	"flux": {
		doc: "Flux.1-dev diffusion model as released (no prefix)",
		parts: func(s scaler) []component {
			return []component{{"", "diffusion", s.flux(fluxDev).build}}
		},
	},
	"sd1_unet": {
		doc: "SD 1.x UNet alone, unprefixed (a --diffusion-model file)",
		parts: func(s scaler) []component {
			unet := s.unet(sd1UNet)
			unet.ctx = s.clip(clipL, "text").Hidden
			return []component{{"", "diffusion", unet.build}}
		},
	},
	"vae": {
		doc: "SD/SDXL VAE alone, unprefixed (a --vae file)",
		parts: func(s scaler) []component {
			return []component{{"", "vae", s.vae(sd1VAE).build}}
		},
	},
	"clip_l": {
		doc: "CLIP-L text encoder alone (Hugging Face CLIPTextModel names under text_model.)",
		parts: func(s scaler) []component {
			return []component{{"text_model.", "text", s.clip(clipL, "text").buildHF}}
		},
	},
	"t5xxl": {
		doc: "T5-XXL v1.1 encoder alone (T5EncoderModel names: shared., encoder.block.N.)",
		parts: func(s scaler) []component {
			return []component{{"", "text", s.t5(t5xxl).build}}
		},
	},
	"wan": {
		doc: "Wan 2.1 T2V 1.3B diffusion model as released (no prefix; 5-D patch_embedding)",
		parts: func(s scaler) []component {
			return []component{{"", "diffusion", s.wan(wan13B).build}}
		},
	},
}

// Archs lists the architecture names the generator knows, sorted.
func Archs() []string {
	var out []string
	for k := range archs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ArchDoc returns a one-line description of an architecture.
func ArchDoc(name string) string { return archs[name].doc }

// scaler applies a Spec's width and depth reductions to real sizes.
type scaler struct{ spec Spec }

func (s scaler) scale(kind string) float64 {
	f := s.spec.Scale
	switch kind {
	case "text":
		if s.spec.TextScale != 0 {
			f = s.spec.TextScale
		}
	case "vae":
		if s.spec.VAEScale != 0 {
			f = s.spec.VAEScale
		}
	}
	if f <= 0 {
		return 1
	}
	return f
}

// width scales a real width: the nearest power of two to n×scale (so that
// scaled rows stay multiples of the quantization blocks), at least 4.
func (s scaler) width(n int, kind string) int {
	f := s.scale(kind)
	if f == 1 {
		return n
	}
	v := float64(n) * f
	p := 1 << int(math.Round(math.Log2(math.Max(v, 1))))
	return max(p, 4)
}

// depth caps a repeat count at Spec.Depth.
func (s scaler) depth(n int) int {
	if s.spec.Depth > 0 && n > s.spec.Depth {
		return s.spec.Depth
	}
	return n
}

type scaledUNet struct {
	unetConfig
	ctx int
}

func (s scaler) unet(c unetConfig) scaledUNet {
	out := c
	out.ModelChannels = s.width(c.ModelChannels, "diffusion")
	out.Depth = append([]int(nil), c.Depth...)
	for i, d := range out.Depth {
		if d > 0 {
			out.Depth[i] = s.depth(d)
		}
	}
	out.MiddleDepth = s.depth(c.MiddleDepth)
	return scaledUNet{unetConfig: out}
}

func (s scaler) vae(c vaeConfig) vaeConfig {
	c.Ch = s.width(c.Ch, "vae")
	return c
}

func (s scaler) clip(c clipConfig, kind string) clipConfig {
	if s.scale(kind) == 1 {
		c.Layers = s.depth(c.Layers)
		return c
	}
	c.Hidden = s.width(c.Hidden, kind)
	c.FF = s.width(c.FF, kind)
	c.Layers = s.depth(c.Layers)
	// The vocabulary shrinks with the square of the scale so that the
	// embedding keeps roughly its share of the parameters.
	f := s.scale(kind)
	c.Vocab = max(64, 1<<int(math.Round(math.Log2(float64(c.Vocab)*f*f))))
	return c
}

func (s scaler) t5(c t5Config) t5Config {
	c.Layers = s.depth(c.Layers)
	if f := s.scale("text"); f != 1 {
		c.Model = s.width(c.Model, "text")
		c.FF = s.width(c.FF, "text")
		c.Heads = max(1, s.width(c.Heads, "text"))
		c.Vocab = max(64, 1<<int(math.Round(math.Log2(float64(c.Vocab)*f*f))))
	}
	return c
}

func (s scaler) flux(c fluxConfig) fluxConfig {
	if s.scale("diffusion") == 1 {
		c.Double, c.Single = s.depth(c.Double), s.depth(c.Single)
		return c
	}
	c.Hidden = s.width(c.Hidden, "diffusion")
	// Flux's RoPE axes (16, 56, 56) fix the head width at 128: scale the
	// number of heads, not their width, so that scaled models still run.
	c.HeadDim = min(c.HeadDim, c.Hidden)
	c.MLP = 4 * c.Hidden
	c.VecIn = s.width(c.VecIn, "diffusion")
	c.ContextIn = s.width(c.ContextIn, "diffusion")
	c.Double, c.Single = s.depth(c.Double), s.depth(c.Single)
	return c
}

func (s scaler) wan(c wanConfig) wanConfig {
	c.Layers = s.depth(c.Layers)
	if s.scale("diffusion") == 1 {
		return c
	}
	c.Dim = s.width(c.Dim, "diffusion")
	c.HeadDim = min(s.width(c.HeadDim, "diffusion"), c.Dim)
	c.FFN = s.width(c.FFN, "diffusion")
	c.TextDim = s.width(c.TextDim, "diffusion")
	return c
}

// builder collects tensor specs under a prefix.
type builder struct {
	prefix string
	out    []TensorSpec
}

func (b *builder) add(name string, init Init, shape ...int) {
	s := make([]int64, len(shape))
	for i, d := range shape {
		s[i] = int64(d)
	}
	b.out = append(b.out, TensorSpec{Name: b.prefix + name, Shape: s, Init: init})
}

// linear adds name.weight [out, in] and, when bias, name.bias [out].
func (b *builder) linear(name string, out, in int, bias bool) {
	b.add(name+".weight", InitWeight, out, in)
	if bias {
		b.add(name+".bias", InitBias, out)
	}
}

// conv adds a 2-D convolution with bias.
func (b *builder) conv(name string, out, in, k int) {
	b.add(name+".weight", InitWeight, out, in, k, k)
	b.add(name+".bias", InitBias, out)
}

// norm adds a norm's weight and bias.
func (b *builder) norm(name string, n int) {
	b.add(name+".weight", InitOne, n)
	b.add(name+".bias", InitBias, n)
}

func itoa(i int) string { return strconv.Itoa(i) }

// build expands an LDM UNet (openaimodel.py naming).
func (u scaledUNet) build(b *builder) {
	mc := u.ModelChannels
	temb := 4 * mc
	b.linear("time_embed.0", temb, mc, true)
	b.linear("time_embed.2", temb, temb, true)
	if u.ADMIn > 0 {
		b.linear("label_emb.0.0", temb, u.ADMIn, true)
		b.linear("label_emb.0.2", temb, temb, true)
	}
	b.conv("input_blocks.0.0", mc, u.InChannels, 3)
	chans := []int{mc}
	ch, idx := mc, 1
	for level, m := range u.Mult {
		for i := 0; i < u.NumRes; i++ {
			p := "input_blocks." + itoa(idx)
			u.resBlock(b, p+".0", ch, m*mc, temb)
			ch = m * mc
			if u.Depth[level] > 0 {
				u.transformer(b, p+".1", ch, u.Depth[level])
			}
			chans = append(chans, ch)
			idx++
		}
		if level != len(u.Mult)-1 {
			b.conv("input_blocks."+itoa(idx)+".0.op", ch, ch, 3)
			chans = append(chans, ch)
			idx++
		}
	}
	u.resBlock(b, "middle_block.0", ch, ch, temb)
	u.transformer(b, "middle_block.1", ch, u.MiddleDepth)
	u.resBlock(b, "middle_block.2", ch, ch, temb)
	idx = 0
	for level := len(u.Mult) - 1; level >= 0; level-- {
		for i := 0; i <= u.NumRes; i++ {
			skip := chans[len(chans)-1]
			chans = chans[:len(chans)-1]
			p := "output_blocks." + itoa(idx)
			out := u.Mult[level] * mc
			u.resBlock(b, p+".0", ch+skip, out, temb)
			ch = out
			sub := 1
			if u.Depth[level] > 0 {
				u.transformer(b, p+".1", ch, u.Depth[level])
				sub = 2
			}
			if level > 0 && i == u.NumRes {
				b.conv(p+"."+itoa(sub)+".conv", ch, ch, 3)
			}
			idx++
		}
	}
	b.norm("out.0", ch)
	b.conv("out.2", u.OutChannels, ch, 3)
}

func (u scaledUNet) resBlock(b *builder, p string, in, out, temb int) {
	b.norm(p+".in_layers.0", in)
	b.conv(p+".in_layers.2", out, in, 3)
	b.linear(p+".emb_layers.1", out, temb, true)
	b.norm(p+".out_layers.0", out)
	b.conv(p+".out_layers.3", out, out, 3)
	if in != out {
		b.conv(p+".skip_connection", out, in, 1)
	}
}

func (u scaledUNet) transformer(b *builder, p string, ch, depth int) {
	b.norm(p+".norm", ch)
	if u.LinearProj {
		b.linear(p+".proj_in", ch, ch, true)
	} else {
		b.conv(p+".proj_in", ch, ch, 1)
	}
	for d := 0; d < depth; d++ {
		t := p + ".transformer_blocks." + itoa(d)
		for _, a := range []struct {
			name string
			kv   int
		}{{"attn1", ch}, {"attn2", u.ctx}} {
			b.linear(t+"."+a.name+".to_q", ch, ch, false)
			b.linear(t+"."+a.name+".to_k", ch, a.kv, false)
			b.linear(t+"."+a.name+".to_v", ch, a.kv, false)
			b.linear(t+"."+a.name+".to_out.0", ch, ch, true)
		}
		// GEGLU: the projection produces the gate and the value, 4×ch each.
		b.linear(t+".ff.net.0.proj", 8*ch, ch, true)
		b.linear(t+".ff.net.2", ch, 4*ch, true)
		b.norm(t+".norm1", ch)
		b.norm(t+".norm2", ch)
		b.norm(t+".norm3", ch)
	}
	if u.LinearProj {
		b.linear(p+".proj_out", ch, ch, true)
	} else {
		b.conv(p+".proj_out", ch, ch, 1)
	}
}

// build expands an LDM AutoencoderKL (encoder, decoder, quant convs).
func (v vaeConfig) build(b *builder) {
	res := func(p string, in, out int) {
		b.norm(p+".norm1", in)
		b.conv(p+".conv1", out, in, 3)
		b.norm(p+".norm2", out)
		b.conv(p+".conv2", out, out, 3)
		if in != out {
			b.conv(p+".nin_shortcut", out, in, 1)
		}
	}
	mid := func(p string, ch int) {
		res(p+".mid.block_1", ch, ch)
		b.norm(p+".mid.attn_1.norm", ch)
		for _, n := range []string{"q", "k", "v", "proj_out"} {
			b.conv(p+".mid.attn_1."+n, ch, ch, 1)
		}
		res(p+".mid.block_2", ch, ch)
	}
	b.conv("encoder.conv_in", v.Ch, v.InCh, 3)
	ch := v.Ch
	for level, m := range v.Mult {
		for i := 0; i < v.NumRes; i++ {
			res("encoder.down."+itoa(level)+".block."+itoa(i), ch, m*v.Ch)
			ch = m * v.Ch
		}
		if level != len(v.Mult)-1 {
			b.conv("encoder.down."+itoa(level)+".downsample.conv", ch, ch, 3)
		}
	}
	mid("encoder", ch)
	b.norm("encoder.norm_out", ch)
	b.conv("encoder.conv_out", 2*v.ZCh, ch, 3)

	dc := v.Ch
	if v.DecCh != 0 {
		dc = v.DecCh
	}
	ch = dc * v.Mult[len(v.Mult)-1]
	b.conv("decoder.conv_in", ch, v.ZCh, 3)
	mid("decoder", ch)
	for level := len(v.Mult) - 1; level >= 0; level-- {
		out := v.Mult[level] * dc
		for i := 0; i <= v.NumRes; i++ {
			res("decoder.up."+itoa(level)+".block."+itoa(i), ch, out)
			ch = out
		}
		if level != 0 {
			b.conv("decoder.up."+itoa(level)+".upsample.conv", ch, ch, 3)
		}
	}
	b.norm("decoder.norm_out", ch)
	b.conv("decoder.conv_out", v.InCh, ch, 3)
	if !v.NoQuantConv {
		b.conv("quant_conv", 2*v.ZCh, 2*v.ZCh, 1)
		b.conv("post_quant_conv", v.ZCh, v.ZCh, 1)
	}
}

// buildHF expands a Hugging Face CLIPTextModel under text_model.
func (c clipConfig) buildHF(b *builder) {
	b.add("embeddings.token_embedding.weight", InitWeight, c.Vocab, c.Hidden)
	b.add("embeddings.position_embedding.weight", InitWeight, c.Positions, c.Hidden)
	if c.PositionIDs {
		b.add("embeddings.position_ids", InitIndex, 1, c.Positions)
	}
	for l := 0; l < c.Layers; l++ {
		p := "encoder.layers." + itoa(l)
		for _, n := range []string{"k_proj", "v_proj", "q_proj", "out_proj"} {
			b.linear(p+".self_attn."+n, c.Hidden, c.Hidden, true)
		}
		b.norm(p+".layer_norm1", c.Hidden)
		b.linear(p+".mlp.fc1", c.FF, c.Hidden, true)
		b.linear(p+".mlp.fc2", c.Hidden, c.FF, true)
		b.norm(p+".layer_norm2", c.Hidden)
	}
	b.norm("final_layer_norm", c.Hidden)
	if c.Projection {
		b.add("text_projection.weight", InitWeight, c.Hidden, c.Hidden)
	}
}

// buildOpenCLIP expands an OpenCLIP text tower (SDXL's CLIP-G naming).
func (c clipConfig) buildOpenCLIP(b *builder) {
	b.add("positional_embedding", InitWeight, c.Positions, c.Hidden)
	b.add("token_embedding.weight", InitWeight, c.Vocab, c.Hidden)
	for l := 0; l < c.Layers; l++ {
		p := "transformer.resblocks." + itoa(l)
		b.norm(p+".ln_1", c.Hidden)
		b.add(p+".attn.in_proj_weight", InitWeight, 3*c.Hidden, c.Hidden)
		b.add(p+".attn.in_proj_bias", InitBias, 3*c.Hidden)
		b.linear(p+".attn.out_proj", c.Hidden, c.Hidden, true)
		b.norm(p+".ln_2", c.Hidden)
		b.linear(p+".mlp.c_fc", c.FF, c.Hidden, true)
		b.linear(p+".mlp.c_proj", c.Hidden, c.FF, true)
	}
	b.norm("ln_final", c.Hidden)
	b.add("text_projection", InitWeight, c.Hidden, c.Hidden)
	if c.LogitScale {
		b.add("logit_scale", InitOne)
	}
}

// build expands a T5 encoder; block 0 holds the relative attention bias.
func (c t5Config) build(b *builder) {
	b.add("shared.weight", InitWeight, c.Vocab, c.Model)
	for i := 0; i < c.Layers; i++ {
		p := "encoder.block." + itoa(i) + ".layer."
		for _, n := range []string{"q", "k", "v", "o"} {
			b.linear(p+"0.SelfAttention."+n, c.Model, c.Model, false)
		}
		if i == 0 {
			b.add(p+"0.SelfAttention.relative_attention_bias.weight", InitWeight, c.Buckets, c.Heads)
		}
		b.add(p+"0.layer_norm.weight", InitOne, c.Model)
		b.linear(p+"1.DenseReluDense.wi_0", c.FF, c.Model, false)
		b.linear(p+"1.DenseReluDense.wi_1", c.FF, c.Model, false)
		b.linear(p+"1.DenseReluDense.wo", c.Model, c.FF, false)
		b.add(p+"1.layer_norm.weight", InitOne, c.Model)
	}
	b.add("encoder.final_layer_norm.weight", InitOne, c.Model)
}

// build expands the Flux DiT (BFL reference naming).
func (c fluxConfig) build(b *builder) {
	h := c.Hidden
	mlp := func(p string, in int) {
		b.linear(p+".in_layer", h, in, true)
		b.linear(p+".out_layer", h, h, true)
	}
	b.linear("img_in", h, c.In, true)
	chroma := c.ApproxInner > 0
	if chroma {
		a := "distilled_guidance_layer."
		b.linear(a+"in_proj", c.ApproxInner, 64, true)
		for i := 0; i < c.ApproxLayers; i++ {
			b.linear(a+"layers."+itoa(i)+".in_layer", c.ApproxInner, c.ApproxInner, true)
			b.linear(a+"layers."+itoa(i)+".out_layer", c.ApproxInner, c.ApproxInner, true)
			b.add(a+"norms."+itoa(i)+".scale", InitOne, c.ApproxInner)
		}
		b.linear(a+"out_proj", h, c.ApproxInner, true)
	} else {
		mlp("time_in", c.TimeIn)
		if c.Guidance {
			mlp("guidance_in", c.TimeIn)
		}
		mlp("vector_in", c.VecIn)
	}
	b.linear("txt_in", h, c.ContextIn, true)
	for i := 0; i < c.Double; i++ {
		p := "double_blocks." + itoa(i)
		for _, s := range []string{"img", "txt"} {
			if !chroma {
				b.linear(p+"."+s+"_mod.lin", 6*h, h, true)
			}
			b.linear(p+"."+s+"_attn.qkv", 3*h, h, true)
			b.add(p+"."+s+"_attn.norm.query_norm.scale", InitOne, c.HeadDim)
			b.add(p+"."+s+"_attn.norm.key_norm.scale", InitOne, c.HeadDim)
			b.linear(p+"."+s+"_attn.proj", h, h, true)
			b.linear(p+"."+s+"_mlp.0", c.MLP, h, true)
			b.linear(p+"."+s+"_mlp.2", h, c.MLP, true)
		}
	}
	for i := 0; i < c.Single; i++ {
		p := "single_blocks." + itoa(i)
		b.linear(p+".linear1", 3*h+c.MLP, h, true)
		b.linear(p+".linear2", h, h+c.MLP, true)
		b.add(p+".norm.query_norm.scale", InitOne, c.HeadDim)
		b.add(p+".norm.key_norm.scale", InitOne, c.HeadDim)
		if !chroma {
			b.linear(p+".modulation.lin", 3*h, h, true)
		}
	}
	b.linear("final_layer.linear", c.In, h, true)
	if !chroma {
		b.linear("final_layer.adaLN_modulation.1", 2*h, h, true)
	}
}

// build expands the Wan DiT (Wan-AI reference naming; patch (1, 2, 2)).
func (c wanConfig) build(b *builder) {
	d := c.Dim
	b.add("patch_embedding.weight", InitWeight, d, c.In, 1, 2, 2)
	b.add("patch_embedding.bias", InitBias, d)
	b.linear("text_embedding.0", d, c.TextDim, true)
	b.linear("text_embedding.2", d, d, true)
	b.linear("time_embedding.0", d, c.FreqDim, true)
	b.linear("time_embedding.2", d, d, true)
	b.linear("time_projection.1", 6*d, d, true)
	for i := 0; i < c.Layers; i++ {
		p := "blocks." + itoa(i)
		b.add(p+".modulation", InitWeight, 1, 6, d)
		for _, a := range []string{"self_attn", "cross_attn"} {
			for _, n := range []string{"q", "k", "v", "o"} {
				b.linear(p+"."+a+"."+n, d, d, true)
			}
			b.add(p+"."+a+".norm_q.weight", InitOne, d)
			b.add(p+"."+a+".norm_k.weight", InitOne, d)
		}
		b.norm(p+".norm3", d)
		b.linear(p+".ffn.0", c.FFN, d, true)
		b.linear(p+".ffn.2", d, c.FFN, true)
	}
	b.add("head.modulation", InitWeight, 1, 2, d)
	b.linear("head.head", c.Out*4, d, true)
}

func archParts(spec Spec) ([]component, error) {
	a, ok := archs[spec.Arch]
	if !ok {
		return nil, fmt.Errorf("synth: unknown architecture %q (known: %v)", spec.Arch, Archs())
	}
	return a.parts(scaler{spec}), nil
}

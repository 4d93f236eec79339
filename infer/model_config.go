package infer

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// Metadata keys that override what detection from tensor shapes cannot
// tell (GGUF values of any integer or string type; safetensors metadata
// strings). `sdtool convert --metadata KEY=VALUE` writes them.
const (
	// MetaUNetHeads is the UNet's attention head count at every level (SD 1.x: 8).
	MetaUNetHeads = "sdtool.unet.num_heads"
	// MetaUNetHeadDim is the UNet's attention head width (SD 2.x: 64); used when MetaUNetHeads is absent.
	MetaUNetHeadDim = "sdtool.unet.head_dim"
	// MetaCLIPHeads is the text encoder's head count (default: hidden/64).
	MetaCLIPHeads = "sdtool.clip.num_heads"
	// MetaCLIPAct is the text encoder's MLP activation, "quick_gelu" (CLIP-L) or "gelu" (OpenCLIP-H).
	MetaCLIPAct = "sdtool.clip.hidden_act"
	// MetaCLIPSkip selects the text encoder layer: 1 the last (SD 1.x), 2 the penultimate (SD 2.x).
	MetaCLIPSkip = "sdtool.clip.skip"
	// MetaPrediction is the UNet's prediction type, "eps" or "v".
	MetaPrediction = "sdtool.prediction"
	// MetaDefaultWidth, MetaDefaultHeight and MetaDefaultSteps are generate's
	// defaults for the model when the flags are not given (the tiny test
	// model uses them to stay fast).
	MetaDefaultWidth  = "sdtool.generate.width"
	MetaDefaultHeight = "sdtool.generate.height"
	MetaDefaultSteps  = "sdtool.generate.steps"
	// MetaModelSpecPrediction is ModelSpec's prediction key ("epsilon" or "v"), read when MetaPrediction is absent.
	MetaModelSpecPrediction = "modelspec.prediction_type"
)

// UNetConfig is an LDM UNet's configuration, detected from tensor shapes.
type UNetConfig struct {
	// InChannels and OutChannels are the latent channels (4 for SD).
	InChannels, OutChannels int
	// ModelChannels is the width of the first level (SD: 320).
	ModelChannels int
	// ChannelMult multiplies ModelChannels per level (SD: 1 2 4 4).
	ChannelMult []int
	// NumResBlocks is the number of residual blocks per input level (SD: 2).
	NumResBlocks int
	// TransformerDepth is the transformer depth per level (0: no attention).
	TransformerDepth []int
	// MiddleDepth is the middle block's transformer depth.
	MiddleDepth int
	// ContextDim is the cross-attention context width (SD1: 768, SD2: 1024, SDXL: 2048).
	ContextDim int
	// NumHeads is the head count at every level; 0 when HeadDim applies.
	NumHeads int
	// HeadDim is the head width when NumHeads is 0.
	HeadDim int
	// LinearProj reports linear proj_in/proj_out (SD 2.x, SDXL) instead of 1x1 convs.
	LinearProj bool
	// ADMChannels is the width of the class-embedding input (SDXL's 2816
	// conditioning vector, label_emb), 0 when there is none.
	ADMChannels int
}

// heads returns the head count of a transformer at width ch.
func (c *UNetConfig) heads(ch int) int {
	if c.NumHeads > 0 {
		return c.NumHeads
	}
	return max(ch/c.HeadDim, 1)
}

// CLIPConfig is a CLIP text encoder's configuration.
type CLIPConfig struct {
	// Component is the sd-cli flag of its standalone file ("clip_l", "clip_g").
	Component string
	// Prefix is where its weights live among the internal names.
	Prefix string
	// Hidden, FF, Layers, Vocab and Positions are the transformer's sizes.
	Hidden, FF, Layers, Vocab, Positions int
	// Heads is the attention head count.
	Heads int
	// QuickGELU selects x·sigmoid(1.702x) (CLIP-L) over GELU (OpenCLIP).
	QuickGELU bool
	// Skip is 1 for the last layer's output, 2 for the penultimate.
	Skip int
	// FinalNorm applies the final layer norm to the selected layer's output.
	FinalNorm bool
	// FusedQKV reports OpenCLIP's in_proj (one [3h, h] weight) instead of q/k/v projections.
	FusedQKV bool
	// PadID is the token that pads prompts (EOS for CLIP-L, 0 for OpenCLIP in SD 2.x).
	PadID int
	// Projection is the width of text_projection's output (0: no projection, the pooled output is the hidden state).
	Projection int
}

// VAEConfig is the autoencoder's configuration: what the engine needs of
// any VAE, and the kind's own layout.
type VAEConfig struct {
	// Kind is the VAE kind (VAEFacts.Kind: "kl").
	Kind string
	// ZChannels is the latent width (4 for SD, 16 for Flux).
	ZChannels int
	// HasEncoder reports encoder weights (for img2img).
	HasEncoder bool
	// ScaleFactor and ShiftFactor map VAE latents to diffusion latents:
	// z = (z_vae - ShiftFactor) * ScaleFactor (SD: 0.18215 and 0).
	ScaleFactor, ShiftFactor float32
	// ConvScale, when not 0, scales each convolution's input by it and the
	// output back (sd-cli's guard against f16 overflow in SDXL's own VAE).
	ConvScale float32
	// Layout is the kind's own configuration (*KLConfig for "kl").
	Layout any
}

// vaeKind is what the core needs of a kind of VAE (VAEFacts.Kind).
type vaeKind struct {
	// detect reads the VAE's configuration from the shapes into c (whose
	// Kind is set).
	detect func(s shapes, c *VAEConfig) error
	// decode builds the decoder from a VAE latent [w, h, Z, N] (unscaled
	// and unshifted) to pixels; encode the encoder from pixels [W, H, 3,
	// N] to the latent distribution's moments (mean, then log-variance).
	decode, encode func(g *builder, c *VAEConfig, x native.Tensor) native.Tensor
	// isWeight reports a tensor of this kind of VAE (internal name).
	isWeight func(name string) bool
}

// vaeKinds are the VAE kinds by name, registered by their files.
var vaeKinds = map[string]vaeKind{}

// ModelConfig is the configuration of a whole model.
type ModelConfig struct {
	// Family is the detected family's name ("sd1", "sd2", "sdxl"; see Families).
	Family string
	// Network is the diffusion network's configuration, detected by the
	// family's network kind (*UNetConfig, *FluxConfig, ...).
	Network NetworkConfig
	// Encoders are the text encoders' configurations (*CLIPConfig,
	// *T5Config, ...), in the family's Encoders order; an optional encoder
	// the files lack has none.
	Encoders []EncoderConfig
	// VAE describes the autoencoder.
	VAE VAEConfig
	// Prediction is the prediction type from metadata; PredictionKnown is
	// false when neither metadata nor the caller set it and the family
	// probes the network.
	Prediction      Prediction
	PredictionKnown bool
	// DefaultWidth, DefaultHeight and DefaultSteps come from the metadata (0 when absent).
	DefaultWidth, DefaultHeight, DefaultSteps int
}

// NetworkConfig is a diffusion network's configuration.
type NetworkConfig interface {
	// LatentChannels is the latent width the network denoises.
	LatentChannels() int
}

// vectorTaker is a network configuration that takes a conditioning
// vector of a fixed width (the UNet's label_emb: SDXL's ADM vector).
type vectorTaker interface{ vectorWidth() int }

// contextTaker is a network configuration whose cross-attention reads a
// context of a fixed width, checked against its text encoders' widths.
type contextTaker interface{ contextWidth() int }

// LatentChannels is the latent width the UNet denoises.
func (c *UNetConfig) LatentChannels() int { return c.OutChannels }

func (c *UNetConfig) vectorWidth() int  { return c.ADMChannels }
func (c *UNetConfig) contextWidth() int { return c.ContextDim }

// EncoderConfig is a text encoder's configuration.
type EncoderConfig interface {
	// Input is the input-table flag of the encoder's standalone file ("clip_l").
	Input() string
	// Width is the width of its hidden states.
	Width() int
}

// Encoder returns the configuration of the text encoder whose file comes
// from the input flag ("clip_l", "t5xxl").
func (c *ModelConfig) Encoder(flag string) (EncoderConfig, bool) {
	for _, e := range c.Encoders {
		if e.Input() == flag {
			return e, true
		}
	}
	return nil, false
}

// shapes maps weight names to PyTorch shapes.
type shapes map[string][]int64

func (s shapes) dim(name string, i int) (int, error) {
	sh, ok := s[name]
	if !ok {
		return 0, fmt.Errorf("model has no tensor %q", name)
	}
	if i >= len(sh) {
		return 0, fmt.Errorf("tensor %q has shape %v, want at least %d dims", name, sh, i+1)
	}
	return int(sh[i]), nil
}

func (s shapes) has(name string) bool { _, ok := s[name]; return ok }

// hasPrefix reports whether any tensor's name starts with prefix.
func (s shapes) hasPrefix(prefix string) bool {
	for n := range s {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// metaInt reads an integer metadata value (any integer type, or a decimal string).
func metaInt(md formats.Metadata, key string) (int, bool, error) {
	kv, ok := md.Get(key)
	if !ok {
		return 0, false, nil
	}
	var v int64
	switch x := kv.Value.(type) {
	case uint8:
		v = int64(x)
	case int8:
		v = int64(x)
	case uint16:
		v = int64(x)
	case int16:
		v = int64(x)
	case uint32:
		v = int64(x)
	case int32:
		v = int64(x)
	case uint64:
		v = int64(x)
	case int64:
		v = x
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 32)
		if err != nil {
			return 0, true, fmt.Errorf("metadata %s = %q is not an integer", key, x)
		}
		v = n
	default:
		return 0, true, fmt.Errorf("metadata %s has type %s, want an integer", key, kv.Type)
	}
	if v <= 0 || v > 1<<16 {
		return 0, true, fmt.Errorf("metadata %s = %d is out of range", key, v)
	}
	return int(v), true, nil
}

// encoderKind is what the core needs of a kind of text encoder (TextEncoder.Kind).
type encoderKind struct {
	// detect reads the encoder's configuration from the shapes and the
	// metadata overrides.
	detect func(s shapes, md formats.Metadata, e *TextEncoder) (EncoderConfig, error)
	// tokenizer loads the kind's tokenizer (once per model, whatever the
	// number of encoders of the kind) from the options or the component
	// files and checks it against the encoders' vocabularies; nil and no
	// error when the kind can run without one.
	tokenizer func(opt LoadOptions, srcs []*openSource, encs []EncoderConfig, main string) (any, error)
}

// encoderKinds are the text encoder kinds by name, registered by their files.
var encoderKinds = map[string]encoderKind{}

// networkDetectors detect a network's configuration by its kind (Family.Network).
var networkDetectors = map[string]func(s shapes, md formats.Metadata, cfg *ModelConfig) error{
	"unet": func(s shapes, md formats.Metadata, cfg *ModelConfig) error {
		u := &UNetConfig{}
		cfg.Network = u
		return detectUNet(s, md, u)
	},
}

// DetectConfig works out a model's family and configuration from its
// weights' shapes (internal names) and the metadata overrides.
func DetectConfig(sh map[string][]int64, md formats.Metadata) (*ModelConfig, error) {
	s := shapes(sh)
	fam, err := DetectFamily(sh)
	if err != nil {
		return nil, err
	}
	cfg := &ModelConfig{Family: fam.Name()}
	det, ok := networkDetectors[fam.Network]
	if !ok {
		return nil, fmt.Errorf("%s: no network %q in this build", fam.Title, fam.Network)
	}
	if err := det(s, md, cfg); err != nil {
		return nil, &componentError{"diffusion-model", fmt.Errorf("%s diffusion model: %w", fam.Title, err)}
	}
	for i := range fam.Encoders {
		e := &fam.Encoders[i]
		if e.Optional && !s.hasPrefix(e.Prefix) {
			continue // sd-cli conditions on zeros in its place
		}
		kind, ok := encoderKinds[e.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: no text encoder kind %q in this build", fam.Title, e.Kind)
		}
		ec, err := kind.detect(s, md, e)
		if err != nil {
			return nil, &componentError{e.Component, fmt.Errorf("%s text encoder (%s): %w", fam.Title, e.Component, err)}
		}
		cfg.Encoders = append(cfg.Encoders, ec)
	}
	if u, ok := cfg.Network.(contextTaker); ok {
		ctx := 0
		for _, e := range fam.Encoders {
			if ec, ok := cfg.Encoder(e.Component); ok && e.Hidden {
				ctx += ec.Width()
			}
		}
		if ctx != u.contextWidth() {
			return nil, fmt.Errorf("%s: the text encoders' widths add up to %d, the UNet's context width is %d", fam.Title, ctx, u.contextWidth())
		}
	}
	vk, ok := vaeKinds[fam.VAE.Kind]
	if !ok {
		return nil, fmt.Errorf("%s: no VAE kind %q in this build", fam.Title, fam.VAE.Kind)
	}
	cfg.VAE.Kind = fam.VAE.Kind
	if err := vk.detect(s, &cfg.VAE); err != nil {
		return nil, &componentError{"vae", fmt.Errorf("VAE: %w", err)}
	}
	if want := cfg.latentChannels(); want > 0 && cfg.VAE.ZChannels != want {
		// Caught here rather than as a size mismatch deep in the decoder's graph.
		return nil, &componentError{"vae", fmt.Errorf("VAE: %sdecoder.conv_in.weight takes %d-channel latents, the %s diffusion model makes %d-channel ones: the VAE is another family's",
			vaePfx, cfg.VAE.ZChannels, fam.Title, want)}
	}
	cfg.VAE.ScaleFactor, cfg.VAE.ShiftFactor = fam.VAE.Scale, fam.VAE.Shift
	cfg.Prediction = fam.Prediction
	cfg.PredictionKnown = !fam.ProbePrediction
	for _, key := range []string{MetaPrediction, MetaModelSpecPrediction} {
		if v, ok := md.String(key); ok {
			p, err := ParsePrediction(v)
			if err != nil {
				return nil, fmt.Errorf("metadata %s: %w", key, err)
			}
			cfg.Prediction, cfg.PredictionKnown = p, true
			break
		}
	}
	for _, d := range []struct {
		key string
		dst *int
	}{{MetaDefaultWidth, &cfg.DefaultWidth}, {MetaDefaultHeight, &cfg.DefaultHeight}, {MetaDefaultSteps, &cfg.DefaultSteps}} {
		v, _, err := metaInt(md, d.key)
		if err != nil {
			return nil, err
		}
		*d.dst = v
	}
	return cfg, nil
}

func detectUNet(s shapes, md formats.Metadata, c *UNetConfig) error {
	p := unetPrefix
	var err error
	if c.ModelChannels, err = s.dim(p+"input_blocks.0.0.weight", 0); err != nil {
		return err
	}
	if c.InChannels, err = s.dim(p+"input_blocks.0.0.weight", 1); err != nil {
		return err
	}
	if c.OutChannels, err = s.dim(p+"out.2.weight", 0); err != nil {
		return err
	}
	mc := c.ModelChannels
	// Walk the input blocks: residual blocks until a downsampler ends a level.
	idx, res := 1, 0
	var mult, depth []int
	for {
		b := fmt.Sprintf("%sinput_blocks.%d.", p, idx)
		if s.has(b + "0.op.weight") {
			if res == 0 {
				return fmt.Errorf("input block %d downsamples an empty level", idx)
			}
			if c.NumResBlocks == 0 {
				c.NumResBlocks = res
			} else if res != c.NumResBlocks {
				return fmt.Errorf("levels with %d and %d residual blocks", c.NumResBlocks, res)
			}
			res = 0
			idx++
			continue
		}
		if !s.has(b + "0.in_layers.2.weight") {
			break
		}
		out, err := s.dim(b+"0.in_layers.2.weight", 0)
		if err != nil {
			return err
		}
		if out%mc != 0 {
			return fmt.Errorf("input block %d has %d channels, not a multiple of %d", idx, out, mc)
		}
		d := countBlocks(s, b+"1.transformer_blocks.")
		if res == 0 {
			mult = append(mult, out/mc)
			depth = append(depth, d)
		} else if mult[len(mult)-1] != out/mc || depth[len(depth)-1] != d {
			return fmt.Errorf("input block %d differs from the rest of its level", idx)
		}
		res++
		idx++
	}
	if len(mult) == 0 {
		return fmt.Errorf("no residual blocks under %sinput_blocks", p)
	}
	if c.NumResBlocks == 0 {
		c.NumResBlocks = res
	} else if res != c.NumResBlocks {
		return fmt.Errorf("the last level has %d residual blocks, the others %d", res, c.NumResBlocks)
	}
	c.ChannelMult, c.TransformerDepth = mult, depth
	if s.has(p + "label_emb.0.0.weight") {
		if c.ADMChannels, err = s.dim(p+"label_emb.0.0.weight", 1); err != nil {
			return err
		}
	}
	c.MiddleDepth = countBlocks(s, p+"middle_block.1.transformer_blocks.")
	// Context width and projection kind from the first transformer.
	for _, pre := range []string{p + "middle_block.1."} {
		if k, ok := s[pre+"transformer_blocks.0.attn2.to_k.weight"]; ok && len(k) == 2 {
			c.ContextDim = int(k[1])
		}
		if w, ok := s[pre+"proj_in.weight"]; ok {
			c.LinearProj = len(w) == 2
		}
	}
	if c.ContextDim == 0 {
		for i := 1; i < idx; i++ {
			b := fmt.Sprintf("%sinput_blocks.%d.1.", p, i)
			if k, ok := s[b+"transformer_blocks.0.attn2.to_k.weight"]; ok && len(k) == 2 {
				c.ContextDim = int(k[1])
				w := s[b+"proj_in.weight"]
				c.LinearProj = len(w) == 2
				break
			}
		}
	}
	if c.ContextDim == 0 {
		return fmt.Errorf("no cross-attention found (attn2.to_k)")
	}
	heads, hok, err := metaInt(md, MetaUNetHeads)
	if err != nil {
		return err
	}
	hd, dok, err := metaInt(md, MetaUNetHeadDim)
	if err != nil {
		return err
	}
	switch {
	case hok:
		c.NumHeads = heads
	case dok:
		c.HeadDim = hd
	case c.ContextDim == 768:
		c.NumHeads = 8 // SD 1.x: num_heads 8
	default:
		c.HeadDim = 64 // SD 2.x: num_head_channels 64
	}
	for level, m := range c.ChannelMult {
		ch := m * mc
		if c.TransformerDepth[level] == 0 {
			continue
		}
		if c.NumHeads > 0 && ch%c.NumHeads != 0 || c.NumHeads == 0 && ch%c.HeadDim != 0 {
			if !hok && !dok {
				return missingHeads(level, ch, c)
			}
			return fmt.Errorf("level %d: %d channels do not split into heads (%d heads, head dim %d)", level, ch, c.NumHeads, c.HeadDim)
		}
	}
	for level, m := range c.ChannelMult {
		if (m*mc)%32 != 0 {
			return fmt.Errorf("level %d: %d channels is not a multiple of GroupNorm's 32 groups", level, m*mc)
		}
	}
	return nil
}

// missingHeads is the error for a UNet whose width does not fit the head
// layout assumed without metadata: it names the keys and how to add them.
func missingHeads(level, ch int, c *UNetConfig) error {
	assumed := fmt.Sprintf("%d heads (SD 1.x's count, for a 768-wide context)", c.NumHeads)
	if c.NumHeads == 0 {
		assumed = fmt.Sprintf("heads %d wide (SD 2.x's width)", c.HeadDim)
	}
	return fmt.Errorf("level %d: %d channels do not split into %s, assumed because the model has no %s or %s metadata; "+
		"add the head count with `sdtool convert -m MODEL -o OUT.gguf --metadata %s=N` (or the width with --metadata %s=N)",
		level, ch, assumed, MetaUNetHeads, MetaUNetHeadDim, MetaUNetHeads, MetaUNetHeadDim)
}

// countBlocks counts prefix0., prefix1., ... that have a norm1 weight.
func countBlocks(s shapes, prefix string) int {
	n := 0
	for s.has(fmt.Sprintf("%s%d.norm1.weight", prefix, n)) {
		n++
	}
	return n
}

// encoderMetaKey returns the metadata key of a text-encoder override: the
// sdtool.clip.* keys for CLIP-L (the only encoder of SD 1.x/2.x) and
// sdtool.<component>.* for the others ("sdtool.clip_g.num_heads").
func encoderMetaKey(component, key string) string {
	if component == "clip_l" {
		return key
	}
	return "sdtool." + component + strings.TrimPrefix(key, "sdtool.clip")
}

// detectCLIP reads a CLIP text encoder's configuration under e.Prefix.
func detectCLIP(s shapes, md formats.Metadata, e *TextEncoder) (EncoderConfig, error) {
	c := &CLIPConfig{Component: e.Component, Prefix: e.Prefix, FinalNorm: e.FinalNorm}
	p := e.Prefix
	var err error
	if c.Vocab, err = s.dim(p+"embeddings.token_embedding.weight", 0); err != nil {
		return nil, err
	}
	if c.Hidden, err = s.dim(p+"embeddings.token_embedding.weight", 1); err != nil {
		return nil, err
	}
	if c.Positions, err = s.dim(p+"embeddings.position_embedding.weight", 0); err != nil {
		return nil, err
	}
	for s.has(fmt.Sprintf("%sencoder.layers.%d.layer_norm1.weight", p, c.Layers)) {
		c.Layers++
	}
	if c.Layers == 0 {
		return nil, fmt.Errorf("no layers under %sencoder.layers", p)
	}
	if c.FF, err = s.dim(p+"encoder.layers.0.mlp.fc1.weight", 0); err != nil {
		return nil, err
	}
	c.FusedQKV = s.has(p + "encoder.layers.0.self_attn.in_proj.weight")
	c.Heads = max(c.Hidden/64, 1)
	if h, ok, err := metaInt(md, encoderMetaKey(e.Component, MetaCLIPHeads)); err != nil {
		return nil, err
	} else if ok {
		c.Heads = h
	}
	if c.Hidden%c.Heads != 0 {
		return nil, fmt.Errorf("%d channels do not split into %d heads", c.Hidden, c.Heads)
	}
	c.QuickGELU = !e.GELU
	if a, ok := md.String(encoderMetaKey(e.Component, MetaCLIPAct)); ok {
		switch a {
		case "quick_gelu":
			c.QuickGELU = true
		case "gelu":
			c.QuickGELU = false
		default:
			return nil, fmt.Errorf("metadata %s = %q (want quick_gelu or gelu)", MetaCLIPAct, a)
		}
	}
	c.Skip = e.Skip
	c.PadID = 0
	if e.PadEOS {
		c.PadID = -1 // EOS
	}
	if k, ok, err := metaInt(md, encoderMetaKey(e.Component, MetaCLIPSkip)); err != nil {
		return nil, err
	} else if ok {
		c.Skip = k
	}
	if c.Skip < 1 || c.Skip > c.Layers {
		return nil, fmt.Errorf("clip skip %d with %d layers", c.Skip, c.Layers)
	}
	if e.Pooled && !e.NoProjection {
		if sh, ok := s[p+"text_projection"]; ok {
			if len(sh) != 2 || sh[1] != int64(c.Hidden) {
				return nil, fmt.Errorf("text_projection has shape %v, want [out, %d]", sh, c.Hidden)
			}
			c.Projection = int(sh[0])
		}
	}
	return c, nil
}

// componentError is a configuration error in one component's weights,
// named by its sd-cli flag ("vae", "clip_l", "diffusion-model"), so that
// Load reports it against that component's own file when one was given.
type componentError struct {
	flag string
	err  error
}

func (e *componentError) Error() string { return e.err.Error() }
func (e *componentError) Unwrap() error { return e.err }

// latentChannels is the latent width the diffusion model denoises, 0 when
// no network is configured.
func (c *ModelConfig) latentChannels() int {
	if c.Network == nil {
		return 0
	}
	return c.Network.LatentChannels()
}

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
	// MetaPrediction is the diffusion network's prediction type, "eps" or "v".
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

// VAEKind is what the core needs of a kind of VAE (VAEFacts.Kind).
type VAEKind struct {
	// Detect reads the VAE's configuration from the shapes into c (whose
	// Kind is set).
	Detect func(s Shapes, c *VAEConfig) error
	// Decode builds the decoder from a VAE latent [w, h, Z, N] (unscaled
	// and unshifted) to pixels; encode the encoder from pixels [W, H, 3,
	// N] to the latent distribution's moments (mean, then log-variance).
	Decode, Encode func(g *Builder, c *VAEConfig, x native.Tensor) native.Tensor
	// IsWeight reports a tensor of this kind of VAE (internal name).
	IsWeight func(name string) bool
	// Factors, when set, returns the pixels per latent cell and the frames
	// per latent frame of the detected VAE, which the family's VAEFacts
	// (Down, TimeFactor) must match.
	Factors func(c *VAEConfig) (spatial, temporal int)
	// MeanOnly reports an encoder whose output is the latent itself (Z
	// channels, no log-variance), which img2img takes without sampling.
	MeanOnly bool
	// EncoderParts are the name prefixes (under first_stage_model.) of the
	// encoder's weights, which LoadOptions.VAEDecodeOnly leaves out.
	EncoderParts []string
	// EncodeVideo, when set, encodes frames of pixels [n][3][H][W] in
	// [-1, 1] to a diffusion latent video [C, frames, h, w] and returns
	// frames; a kind without it encodes each frame as an image (Model.EncodeVideo).
	EncodeVideo func(m *Model, px []float32, w, h, n int) ([]float32, int, error)
	// DecodeVideo, when set, decodes a diffusion latent video [C, frames,
	// h, w] to the video's frames of pixels [n][3][H][W] and returns n
	// (a video VAE unpacks a latent frame into several); a kind without it
	// decodes each latent frame as an image (Model.DecodeVideo).
	DecodeVideo func(m *Model, z []float32, w, h, frames int) ([]float32, int, error)
}

// vaeKinds are the VAE kinds by name, registered by their files.
var vaeKinds = map[string]VAEKind{}

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

// VectorTaker is a network configuration that takes a conditioning
// vector of a fixed width (the UNet's label_emb: SDXL's ADM vector).
type VectorTaker interface{ VectorWidth() int }

// contextTaker is a network configuration whose cross-attention reads a
// context of a fixed width, checked against its text encoders' widths.
type contextTaker interface{ ContextWidth() int }

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

// Shapes maps weight names to PyTorch shapes.
type Shapes map[string][]int64

// Dim returns dimension i of tensor name's shape, or an error naming what is missing.
func (s Shapes) Dim(name string, i int) (int, error) {
	sh, ok := s[name]
	if !ok {
		return 0, fmt.Errorf("model has no tensor %q", name)
	}
	if i >= len(sh) {
		return 0, fmt.Errorf("tensor %q has shape %v, want at least %d dims", name, sh, i+1)
	}
	return int(sh[i]), nil
}

// Has reports whether the model has a tensor called name.
func (s Shapes) Has(name string) bool { _, ok := s[name]; return ok }

// HasPrefix reports whether any tensor's name starts with prefix.
func (s Shapes) HasPrefix(prefix string) bool {
	for n := range s {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// MetaInt reads an integer metadata value (any integer type, or a decimal string).
func MetaInt(md formats.Metadata, key string) (int, bool, error) {
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

// EncoderKind is what the core needs of a kind of text encoder (TextEncoder.Kind).
type EncoderKind struct {
	// Detect reads the encoder's configuration from the shapes and the
	// metadata overrides.
	Detect func(s Shapes, md formats.Metadata, e *TextEncoder) (EncoderConfig, error)
	// Tokenizer loads the kind's tokenizer (once per model, whatever the
	// number of encoders of the kind) from the options or the component
	// files and checks it against the encoders' vocabularies; nil and no
	// error when the kind can run without one.
	Tokenizer func(opt LoadOptions, srcs []*OpenSource, encs []EncoderConfig, main string) (any, error)
}

// encoderKinds are the text encoder kinds by name, registered by their files.
var encoderKinds = map[string]EncoderKind{}

// networkDetectors detect a network's configuration by its kind (Family.Network).
var networkDetectors = map[string]func(s Shapes, md formats.Metadata, cfg *ModelConfig) error{}

// DetectConfig works out a model's family and configuration from its
// weights' shapes (internal names) and the metadata overrides.
func DetectConfig(sh map[string][]int64, md formats.Metadata) (*ModelConfig, error) {
	s := Shapes(sh)
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
		if e.Optional && !s.HasPrefix(e.Prefix) {
			continue // sd-cli conditions on zeros in its place
		}
		kind, ok := encoderKinds[e.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: no text encoder kind %q in this build", fam.Title, e.Kind)
		}
		ec, err := kind.Detect(s, md, e)
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
		if ctx != u.ContextWidth() {
			return nil, fmt.Errorf("%s: the text encoders' widths add up to %d, the diffusion network's context width is %d", fam.Title, ctx, u.ContextWidth())
		}
	}
	vk, ok := vaeKinds[fam.VAE.Kind]
	if !ok {
		return nil, fmt.Errorf("%s: no VAE kind %q in this build", fam.Title, fam.VAE.Kind)
	}
	cfg.VAE.Kind = fam.VAE.Kind
	if err := vk.Detect(s, &cfg.VAE); err != nil {
		return nil, &componentError{"vae", fmt.Errorf("VAE: %w", err)}
	}
	if want := cfg.latentChannels(); want > 0 && cfg.VAE.ZChannels != want {
		// Caught here rather than as a size mismatch deep in the decoder's graph.
		return nil, &componentError{"vae", fmt.Errorf("VAE: %sdecoder.conv_in.weight takes %d-channel latents, the %s diffusion model makes %d-channel ones: the VAE is another family's",
			VAEPfx, cfg.VAE.ZChannels, fam.Title, want)}
	}
	if err := CheckVAEFactors(fam, vk, &cfg.VAE); err != nil {
		return nil, &componentError{"vae", err}
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
		v, _, err := MetaInt(md, d.key)
		if err != nil {
			return nil, err
		}
		*d.dst = v
	}
	return cfg, nil
}

// CheckVAEFactors refuses a VAE whose downsampling differs from the
// family's latent format: one of the right width but another
// downsampling (Wan 2.2's 16 pixels per cell where the entry says 8)
// would decode garbage.
func CheckVAEFactors(fam *Family, vk VAEKind, c *VAEConfig) error {
	if vk.Factors == nil {
		return nil
	}
	sp, tm := vk.Factors(c)
	if sp != fam.VAE.down() || fam.VAE.TimeFactor != 0 && tm != fam.VAE.TimeFactor {
		return fmt.Errorf("VAE: %d pixels per latent cell and %d frames per latent frame, where %s has %d and %d: the VAE is another family's",
			sp, tm, fam.Title, fam.VAE.down(), fam.VAE.TimeFactor)
	}
	return nil
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

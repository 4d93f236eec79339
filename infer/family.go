package infer

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
)

// Model families. A family is data: how its tensors are recognised, which
// engine parts it is built from (a text conditioner, a diffusion network, a
// noise schedule, a VAE) named by registry keys, its parameterisation and
// latent format, and the generation defaults sd-cli uses for it. The engine
// (Load, Generate) only reads this table and calls the parts through the
// registries (register.go), so a new family plugs in by adding a Family entry and,
// when it needs new graphs, registering its parts:
//
//   - a conditioner (conditioners[Family.Conditioner]): prompt to Conditioning
//     (optionally also negativeConditioner for a differently conditioned
//     negative pass);
//   - a network: its configuration detected from shapes into ModelConfig
//     (networkDetectors[Family.Network]) and the graph of one evaluation
//     (networks[Family.Network]);
//   - text encoders of a new kind (encoderKinds[TextEncoder.Kind]): their
//     configuration detected from shapes and their tokenizer's loader;
//   - a VAE of a new kind (vaeKinds[VAEFacts.Kind]): its configuration
//     detected from shapes and its decoder and encoder graphs;
//   - a schedule (schedules[Family.Schedule]): the sigmas and the timestep
//     the network sees.
//
// Which family a model is comes from the family table (package family,
// family.Detect); each engine entry names its table ID, and among the
// entries of one ID the first whose markers match wins, so more specific
// entries come first.

// Marker is one test on a model's tensors (their internal, sd.cpp names).
type Marker struct {
	// Name is the tensor.
	Name string
	// Absent inverts the test: the tensor must not exist.
	Absent bool
	// Dims, when not 0, is the number of dimensions the tensor must have.
	Dims int
	// Dim and Value, when Value is not 0, require shape[Dim] == Value (PyTorch order).
	Dim   int
	Value int64
}

// describe names what the marker requires, for errors.
func (mk Marker) describe() string {
	switch {
	case mk.Absent:
		return "absence of " + mk.Name
	case mk.Value != 0:
		return fmt.Sprintf("%s with dimension %d of %d", mk.Name, mk.Dim, mk.Value)
	case mk.Dims != 0:
		return fmt.Sprintf("%d-dimensional %s", mk.Dims, mk.Name)
	}
	return "tensor " + mk.Name
}

// holds reports whether the marker holds for the shapes.
func (mk Marker) holds(s Shapes) bool {
	sh, ok := s[mk.Name]
	if mk.Absent {
		return !ok
	}
	if !ok || mk.Dims != 0 && len(sh) != mk.Dims {
		return false
	}
	return mk.Value == 0 || mk.Dim < len(sh) && sh[mk.Dim] == mk.Value
}

// TextEncoder is one text encoder a family conditions on.
type TextEncoder struct {
	// Component is the sd-cli flag a standalone file of it comes from ("clip_l", "clip_g", "t5xxl").
	Component string
	// Kind is its architecture ("clip"; Flux adds "t5").
	Kind string
	// Prefix is where its weights live among the internal names
	// ("cond_stage_model.transformer.text_model.").
	Prefix string
	// Skip selects the CLIP layer whose hidden states condition: 1 the last,
	// 2 the penultimate (sd-cli's --clip-skip default for the family).
	Skip int
	// FinalNorm applies the final layer norm to those hidden states (SD 1.x
	// and 2.x; SDXL conditions on the penultimate layer without it).
	FinalNorm bool
	// GELU selects GELU in the MLPs (OpenCLIP) over quick_gelu (OpenAI's CLIP-L).
	GELU bool
	// PadEOS pads prompts with the end-of-text token (CLIP-L); false pads
	// with token 0 (OpenCLIP in SD 2.x).
	PadEOS bool
	// Hidden says whether the encoder's hidden states join the context
	// (false for an encoder used only for its pooled output).
	Hidden bool
	// Pooled says whether the encoder's pooled output (its end-of-text
	// token after the final norm, through text_projection when present)
	// joins the conditioning vector.
	Pooled bool
	// NoProjection pools without text_projection even when the file has
	// one (Flux's CLIP-L, whose pooled output sd.cpp leaves unprojected).
	NoProjection bool
	// Tokens is the encoder's sequence length when it is not CLIP's 77
	// (Flux's T5: 256, as sd-cli pads it).
	Tokens int
	// Optional lets the model load without this encoder, as sd-cli does
	// (it conditions on zeros in its place and warns).
	Optional bool
}

// VectorPart is one piece of a conditioning vector, in order.
type VectorPart struct {
	// Kind is "pooled" (the pooled outputs of the encoders with Pooled set)
	// or an embedding of numbers: "size" (height, width), "crop" (top,
	// left), "target" (height, width) or "score" (Value, or Negative for
	// the negative prompt: the SDXL refiner's aesthetic score).
	Kind string
	// Dim is the width of each number's sinusoidal embedding (SDXL: 256).
	Dim int
	// Value and Negative are the number a "score" part embeds for the
	// prompt and for the negative prompt.
	Value, Negative float32
}

// VAEFacts are a family's VAE: its kind and latent format.
type VAEFacts struct {
	// Kind names the VAE's graph (vaeKinds: "kl", the LDM AutoencoderKL).
	Kind string
	// Scale and Shift map VAE latents to diffusion latents: z_diffusion =
	// (z_vae - Shift) * Scale (SD: 0.18215 and 0; SDXL: 0.13025).
	Scale, Shift float32
	// BuiltinConvScale, when not 0, scales every VAE convolution's input by
	// it (and the output back) when the VAE is the model's own rather than
	// a --vae file: sd-cli does this for SDXL, whose VAE overflows f16.
	BuiltinConvScale float32
	// Down is the pixels per latent cell along each side (0: 8).
	Down int
	// TimeFactor, when not 0, makes the family a video family: its VAE
	// packs the first frame, then every TimeFactor frames, into one latent
	// frame, so F frames are (F-1)/TimeFactor+1 latent frames (Wan: 4).
	TimeFactor int
}

// down returns the pixels per latent cell along each side.
func (v *VAEFacts) down() int {
	if v.Down == 0 {
		return 8
	}
	return v.Down
}

// LatentFrames returns the latent frames of a video of frames frames (0 for an image or an image family).
func (v *VAEFacts) LatentFrames(frames int) int {
	if v.TimeFactor == 0 || frames <= 0 {
		return 0
	}
	return (frames-1)/v.TimeFactor + 1
}

// VideoFrames returns the frames a video family renders for a request of
// frames frames: sd-cli's alignment to what the VAE packs, (F-1)/k·k+1.
func (v *VAEFacts) VideoFrames(frames int) int {
	if lf := v.LatentFrames(frames); lf > 0 {
		return (lf-1)*v.TimeFactor + 1
	}
	return frames
}

// Defaults are sd-cli's generation defaults for a family.
type Defaults struct {
	// Method and Scheduler are the sampler and sigma schedule.
	Method    Method
	Scheduler Scheduler
	// CFGScale is the classifier-free guidance scale (1: no negative pass).
	CFGScale float32
	// Guidance is the distilled guidance a guidance-embedding network gets (Flux dev: 3.5; 0: none).
	Guidance float32
	// Width, Height and Steps are the image size and step count.
	Width, Height, Steps int
	// Frames and FPS are a video family's frame count and frame rate (sd-cli: 6, aligned to 5, at 16).
	Frames, FPS int
}

// Family describes one model family.
type Family struct {
	// ID is the entry of the family table (package family) that this
	// engine entry runs: detection is family.Detect's, and Match only
	// tells apart the engine entries of one ID (the SDXL refiner).
	ID string
	// Variant is the family table's name for the variant this entry runs
	// ("refiner", "dev"; "" for the family in general).
	Variant string
	// Title is its display name ("SD 1.x", "SDXL").
	Title string
	// Match lists alternative marker sets: the family matches when every
	// marker of any one set holds.
	Match [][]Marker
	// Encoders are its text encoders, in the order their hidden states are concatenated.
	Encoders []TextEncoder
	// Vector is the layout of the conditioning vector (nil: none).
	Vector []VectorPart
	// Conditioner, Network and Schedule name the engine parts (registry keys).
	Conditioner, Network, Schedule string
	// Prediction is the parameterisation when metadata does not say;
	// ProbePrediction asks the network instead (SD 2.x: eps or v, as sd.cpp probes).
	Prediction      Prediction
	ProbePrediction bool
	// EmptyNegativeZero makes an empty negative prompt a zero context
	// (its vector is still computed), as sd-cli does for SDXL.
	EmptyNegativeZero bool
	// VAE is the latent format.
	VAE VAEFacts
	// FlowShift is the timestep shift of a flow-matching schedule's
	// timestep-to-sigma map (sd-cli's default --flow-shift: Flux dev 1.15,
	// schnell 1); 0 for the discrete families.
	FlowShift float32
	// Defaults are sd-cli's defaults.
	Defaults Defaults
	// InitFirstFrame runs an init image with a video as sd-cli's
	// image-to-video for a network without image conditioning of its own:
	// the image, VAE-encoded, is latent frame 0, held there through
	// sampling with a timestep of 0 while the other frames are denoised
	// (NetInput.FrameT). Without it an init image with a video is refused.
	InitFirstFrame bool
	// RefLatents makes the network read reference images (Request.Refs,
	// sd-cli's edit mode) as latents beside the render's (NetInput.Refs);
	// without it they are refused, with RefsNeed as the reason when set
	// (what the family's edit mode needs that sdtool does not run).
	RefLatents bool
	RefsNeed   string
}

// Internal-name prefixes (sd.cpp's) of the parts every family has.
const (
	DmPrefix = "model.diffusion_model."
	VAEPfx   = "first_stage_model."
)

// Families is the family table, most specific first among the entries of
// one ID; each family's file appends its entries from init.
var Families []*Family

// Name is the entry's short name: the family table's ID, then its
// variant after a dash ("sd1", "sdxl-refiner", "flux-dev").
func (f *Family) Name() string {
	if f.Variant == "" {
		return f.ID
	}
	return f.ID + "-" + f.Variant
}

// FamilyByName returns the entry whose Name is name.
func FamilyByName(name string) (*Family, bool) {
	for _, f := range Families {
		if f.Name() == name {
			return f, true
		}
	}
	return nil, false
}

// DetectFamily recognises the model with the family table
// (family.Detect on the internal names and shapes) and returns the first
// engine entry of that family whose markers match, or an error naming
// what was found and what generate runs.
func DetectFamily(sh map[string][]int64) (*Family, error) {
	s := Shapes(sh)
	tensors := make([]formats.Tensor, 0, len(sh))
	for n, d := range sh {
		tensors = append(tensors, formats.Tensor{Name: n, Shape: d})
	}
	// Map order is random; detection reads names and shapes only, but its
	// component order follows the input, so sort for stable messages.
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].Name < tensors[j].Name })
	arch := family.Detect(tensors, nil)
	var failed *Marker // of the detected family's first marker set
	for _, f := range Families {
		if f.ID != arch.Name {
			continue
		}
		for _, set := range f.Match {
			ok := true
			for i := range set {
				if !set[i].holds(s) {
					if failed == nil {
						failed = &set[i]
					}
					ok = false
					break
				}
			}
			if ok {
				return f, nil
			}
		}
	}
	if failed != nil {
		// The family is one generate runs, but a part it needs is not
		// there (a component file that replaced it with nothing, say).
		return nil, fmt.Errorf("a %s model without the %s that generate needs", arch.Main().Title, failed.describe())
	}
	names := entryTitles()
	if ff := arch.Main(); ff != nil && ff.Kind == family.KindDiffusion {
		return nil, fmt.Errorf("a %s model: generate runs %s only (sdtool converts and quantizes the others)", ff.Title, strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("not a model family generate knows (%s): %s", strings.Join(names, ", "), missingHint(s))
}

// Entries returns the engine entries in the family table's order (entries
// of one ID in their own order), whatever order the families' files
// registered them in.
func Entries() []*Family {
	order := map[string]int{}
	for i, id := range family.IDs() {
		order[id] = i
	}
	entries := slices.Clone(Families)
	slices.SortStableFunc(entries, func(a, b *Family) int { return order[a.ID] - order[b.ID] })
	return entries
}

// entryTitles lists the engine entries' titles in the family table's order.
func entryTitles() []string {
	var names []string
	for _, f := range Entries() {
		names = append(names, f.Title)
	}
	return names
}

// missingHint says which of the usual parts are missing, for the error above.
func missingHint(s Shapes) string {
	var miss []string
	for _, kind := range []struct{ kind, what string }{
		{family.KindDiffusion, "a diffusion model"}, {family.KindTextEncoder, "text encoders"}, {family.KindVAE, "a VAE"},
	} {
		var flags []string
		found := false
		for _, in := range family.GenerateInputs() {
			if in.Kind != kind.kind {
				continue
			}
			flags = append(flags, "--"+in.Flag)
			for _, p := range in.Parts {
				found = found || s.HasPrefix(p)
			}
		}
		if !found {
			miss = append(miss, kind.what+" ("+strings.Join(flags, ", ")+")")
		}
	}
	if len(miss) == 0 {
		return "the tensors match none of the families' markers"
	}
	return "missing " + strings.Join(miss, ", ")
}

// The registries of engine parts, keyed by the names the table uses.
// The parts fill them from init through register.go's functions.
var (
	conditioners = map[string]conditionerKind{}
	networks     = map[string]networkKind{}
	schedules    = map[string]scheduleKind{}
)

// conditionerKind makes a family's conditioner for a loaded model.
type conditionerKind func(m *Model) (Conditioner, error)

// networkKind detects a network's configuration and makes it.
type networkKind func(m *Model) (Network, error)

// scheduleKind makes a model's noise schedule for an image of w×h latent cells.
type scheduleKind func(m *Model, w, h int) Schedule

package infer

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNoCgo is returned by Load in a binary built without cgo (no ggml; Available is false).
var ErrNoCgo = errors.New("this sdtool was built without cgo, so it has no ggml to run models; rebuild with CGO_ENABLED=1")

// LoadOptions are the settings of Load.
type LoadOptions struct {
	// Tokenizers are tokenizer files by text encoder kind (TextEncoder.Kind:
	// CLIP's tokenizer.json or a folder with vocab.json and merges.txt;
	// T5's spiece.model, unigram tokenizer.json or a folder holding one);
	// a kind without one uses what a component's metadata embeds.
	Tokenizers map[string]string
	// Threads is the ggml thread count (<= 0: all cores).
	Threads int
	// Prediction forces "eps", "v" or "flow"; "" takes metadata, then the family's.
	Prediction string
	// StoredLayout uses every weight as stored, without the layout table
	// (load.go): an OpenCLIP text_projection then multiplies untransposed,
	// as stable-diffusion.cpp does, which reproduces sd-cli's SDXL images
	// from single-file checkpoints (whose pooled embedding it transposes).
	StoredLayout bool
	// VAEDecodeOnly leaves the VAE's encoder out of memory when nothing
	// will encode an image (sd-cli holds it anyway); img2img then fails.
	VAEDecodeOnly bool
	// PartsInTurn, with a budget (MaxMemory), holds one part at a time:
	// the text encoders' weights are dropped before sampling and the
	// network's before decoding, so a render peaks at its largest part
	// rather than at their sum. The next render reads them again (from the
	// page cache when the files fit in it): for one image, as sd-cli's
	// generation does, not for a model that renders many.
	PartsInTurn bool
	// FlowShift, when not 0, replaces the family's flow shift
	// (Family.FlowShift) in a shifted flow schedule, as sd-cli's --flow-shift.
	FlowShift float32
	// Runtime is the runtime whose arithmetic generate reproduces where
	// the runtimes differ: RuntimeSDCPP ("" too) or RuntimeComfyUI
	// (runtimeModule says what differs).
	Runtime string
	// MaxMemory is the memory budget in bytes for the weights and the
	// compute buffers (0: none, every weight resident). Weights that do not
	// fit are read from their files per block as graphs run (stream.go).
	MaxMemory int64
	// Held is what the caller keeps in memory outside the budget while
	// the model runs, in bytes (another model's renders kept for
	// comparison): the weights and compute buffers get the budget less
	// that, and less the block outputs a render captures.
	Held int64
	// Rebudget, when not nil, gives the budget again each time a graph
	// must read weights it does not hold (the text encoders done and the
	// network's turn, each streamed step), given the bytes the model holds
	// in the budget then: a budget taken from the memory available follows
	// what other programs leave during a long run. MaxMemory stays the
	// ceiling, and two of the graph's largest block beside its compute
	// buffer the floor.
	Rebudget func(holding int64) int64
	// ModelArgs are sd-cli's --model-args (key=value), read by the parts
	// that know them (Chroma's chroma_use_dit_mask, chroma_use_t5_mask,
	// chroma_t5_mask_pad); others ignore them, as sd-cli does.
	ModelArgs map[string]string
}

// The runtimes LoadOptions.Runtime names.
const (
	// RuntimeSDCPP is stable-diffusion.cpp (sd-cli), the default.
	RuntimeSDCPP = "sdcpp"
	// RuntimeComfyUI is ComfyUI.
	RuntimeComfyUI = "comfyui"
)

// Request is one image to generate.
type Request struct {
	// Prompt and Negative are the (weighted) prompts.
	Prompt, Negative string
	// Width and Height are the image size in pixels.
	Width, Height int
	// Frames is the number of video frames of a video family (0: its
	// default of one latent frame); an image family ignores it.
	Frames int
	// Steps is the number of sampling steps.
	Steps int
	// CFGScale is the classifier-free guidance scale (1 skips the negative pass).
	CFGScale float32
	// Guidance is the distilled guidance of networks with a guidance embedding (Flux dev); 0 for none.
	Guidance float32
	// Seed seeds the noise generator.
	Seed uint64
	// RNG is "cuda" (sd.cpp's default) or "cpu".
	RNG string
	// Method is the sampler ("": the family's default).
	Method Method
	// Scheduler is the sigma schedule ("": the family's default).
	Scheduler Scheduler
	// Init is an init image [3, Height, Width] in [-1, 1] (CHWFromImage) for img2img, nil for txt2img.
	Init []float32
	// Strength is the img2img denoising strength in (0, 1].
	Strength float32
	// Refs are reference images (sd-cli's -r) for a family that reads
	// them (Family.RefLatents; refs.go).
	Refs []RefImage
	// HighNoise runs the first steps with the model's high-noise expert
	// (Wan 2.2 A14B's --high-noise-diffusion-model), as sd-cli does; nil
	// uses the expert, when the model has one, with DefaultHighNoise.
	HighNoise *HighNoise
	// CaptureBlocks keeps every UNet block's output at the first step (conditional pass).
	CaptureBlocks bool
	// OnStep, when set, is called after every step.
	OnStep func(step, steps int)
	// Context stops the generation when cancelled (nil: never), within the
	// graph node under way; Generate then returns an error wrapping
	// ErrInterrupted and the context's cause.
	Context context.Context
}

// HighNoise are the settings of a high-noise expert's steps (sd-cli's --high-noise-* flags).
type HighNoise struct {
	// Steps is the number of steps the expert runs before the model's own
	// network takes over; the schedule then has Request.Steps + Steps
	// steps. Below 0 the schedule has Request.Steps steps and the expert
	// runs those whose sigma is at least Boundary.
	Steps int
	// Boundary is the sigma below which the model's own network takes over
	// when Steps < 0 (sd-cli's --moe-boundary, 0.875).
	Boundary float32
	// CFGScale is the expert's classifier-free guidance scale.
	CFGScale float32
	// Method is the expert's sampler ("": the family's default).
	Method Method
}

// DefaultHighNoise are sd-cli's defaults for an expert: the switch at
// sigma 0.875, guidance 7 and the family's sampler.
var DefaultHighNoise = HighNoise{Steps: -1, Boundary: 0.875, CFGScale: 7}

// ErrInterrupted is wrapped by Generate's error when Request.Context was cancelled.
var ErrInterrupted = errors.New("interrupted")

// interrupted returns nil, or the error for a cancelled request after step
// of steps.
func (r *Request) interrupted(step, steps int) error {
	if r.Context == nil || r.Context.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w (%v) after step %d of %d", ErrInterrupted, context.Cause(r.Context), step, steps)
}

func (r *Request) check() error {
	switch {
	case r.Width <= 0 || r.Height <= 0:
		return fmt.Errorf("image size %dx%d must be positive", r.Width, r.Height)
	case r.Width*r.Height > 4096*4096:
		return fmt.Errorf("image size %dx%d is too large", r.Width, r.Height)
	case r.Steps <= 0 || r.Steps > 1000:
		return fmt.Errorf("steps %d must be in [1, 1000]", r.Steps)
	case !(r.CFGScale >= 0 && r.CFGScale < 1000):
		return fmt.Errorf("cfg scale %g must be in [0, 1000)", r.CFGScale)
	case !(r.Guidance >= 0 && r.Guidance < 1000):
		return fmt.Errorf("guidance %g must be in [0, 1000)", r.Guidance)
	case r.Frames < 0 || r.Frames > 1024:
		return fmt.Errorf("frames %d must be in [0, 1024]", r.Frames)
	case r.Init != nil && !(r.Strength > 0 && r.Strength <= 1):
		return fmt.Errorf("strength %g must be in (0, 1]", r.Strength)
	}
	if r.RNG == "" {
		r.RNG = RNGCUDA
	}
	if r.Method == "" {
		r.Method = EulerAncestral
	}
	if r.Scheduler == "" {
		r.Scheduler = SchedulerDiscrete
	}
	return nil
}

// BlockOutput is one network block's output at the first sampling step.
type BlockOutput struct {
	// Name is the block ("input_blocks.3", "middle_block", "output_blocks.11").
	Name string
	// Values are its activations [C, H, W].
	Values []float32
}

// Timings says where the time went.
type Timings struct {
	// Text, Sampling and Decode are the text encoder, sampling loop and VAE decoder times.
	Text, Sampling, Decode time.Duration
	// Steps is the number of sampling steps run.
	Steps int
}

// Result is a generated image.
type Result struct {
	// Width and Height are the image size.
	Width, Height int
	// Pixels are the VAE's RGB planes [3, Height, Width], nominally in [-1, 1] (ImageFromCHW converts them);
	// a video's are Frames such images, one after the other.
	Pixels []float32
	// Frames is the number of images in Pixels (1 for an image).
	Frames int
	// Latent is the final latent [C, Height/8, Width/8] (a video's [C, latent frames, Height/8, Width/8]).
	Latent []float32
	// NaNPixels counts the NaN values in Pixels: weights that overflow in
	// this runtime's arithmetic (ImageFromCHW writes them white, as
	// sd-cli does), 0 for a working model.
	NaNPixels int
	// Blocks are the UNet block outputs at the first step, when requested.
	Blocks []BlockOutput
	// Timings says where the time went.
	Timings Timings
}

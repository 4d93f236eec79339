package infer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// Available reports whether this build can run inference (it needs cgo and ggml).
const Available = native.Available

// GraphSize bounds the nodes of one graph (the full SDXL UNet has about 8,000).
const GraphSize = 32768

// Conditioning is what a prompt conditions the diffusion network on.
type Conditioning struct {
	// Context is the token sequence the network attends to (cross-attention
	// context, or a DiT's text tokens), Tokens rows of Dim values.
	Context     []float32
	Tokens, Dim int
	// Vector is the conditioning vector (SDXL's size/crop vector with the
	// pooled text embedding; Flux's pooled CLIP output), nil when none.
	Vector []float32
}

// Conditioner is a family's text conditioning (Family.Conditioner).
type Conditioner interface {
	// Encode conditions on a (weighted) prompt for a width×height image;
	// zero returns a zero context (the vector is still computed), as
	// sd-cli does for an empty SDXL negative prompt.
	Encode(prompt string, width, height int, zero bool) (*Conditioning, error)
}

// NegativeConditioner is a conditioner that conditions the negative prompt
// differently (the SDXL refiner's negative aesthetic score); Generate uses
// it for the negative pass when the family's conditioner implements it.
type NegativeConditioner interface {
	EncodeNegative(prompt string, width, height int, zero bool) (*Conditioning, error)
}

// NetInput is one evaluation of the diffusion network.
type NetInput struct {
	// X is the latent [C, h, w] (a video's [C, frames, h, w]) already scaled by c_in.
	X []float32
	// W and H are the latent's width and height in cells.
	W, H int
	// Frames is the number of latent frames of a video (0 for an image).
	Frames int
	// T is the timestep the network sees (Schedule.SigmaToT).
	T float32
	// FrameT, when not nil, is each latent frame's timestep in place of T
	// (Frames values: 0 for a frame held at the init image's latent,
	// Family.InitFirstFrame).
	FrameT []float32
	// Cond is the conditioning of this pass.
	Cond *Conditioning
	// Guidance is the distilled guidance of a guidance-embedding network (0: none).
	Guidance float32
	// Refs are the reference images' latents (Request.Refs), in every pass.
	Refs []RefLatent
	// Capture keeps the block outputs (--compare).
	Capture bool
}

// Network is a family's diffusion network (Family.Network).
type Network interface {
	// Channels returns the latent channels it takes and returns.
	Channels() int
	// Multiple returns the number of latent cells the latent's width and height must be a multiple of.
	Multiple() int
	// Build builds one evaluation: the output [w, h, C, 1], the graph inputs
	// with their values, and the block outputs when in.capture is set.
	Build(g *Builder, in *NetInput) (native.Tensor, []Input, []BlockTensor)
}

// expertNetwork is a network that has a high-noise expert (Wan 2.2
// A14B): a second network of the same kind that runs the first steps.
type expertNetwork interface {
	// HighNoise returns the expert, nil when the model has none.
	HighNoise() Network
}

// outputMapper is a network whose graph output is not in the latent's
// layout (a DiT's patch tokens); runNet maps it back.
type outputMapper interface {
	MapOutput(out []float32, in *NetInput) []float32
}

// Model is a loaded model ready to generate.
type Model struct {
	// Path is the file that names the model (Components.Main).
	Path string
	// Components are the files it was loaded from.
	Components Components
	// Family is the detected family.
	Family *Family
	// Config is the detected configuration.
	Config *ModelConfig
	// LoadTime is how long loading took.
	LoadTime time.Duration
	// WeightBytes is the size of the weights as ggml holds them.
	WeightBytes int64
	// W8A8Modules counts the INT8 modules run as W8A8, UnscaledFP8 the FP8
	// modules held without their weight scale (LoadOptions.Runtime sdcpp).
	W8A8Modules, UnscaledFP8 int
	// Unused lists the component files (as "--FLAG FILE") of which the
	// family reads no tensor, such as a T5 encoder given to SD 1.x: sd-cli
	// ignores them too, but a user who passed one expected it to matter.
	Unused []string

	// Backend is the ggml backend the graphs run on, Weights the weights, Alloc the
	// graph allocator and Specs where each weight comes from; Cond and Net are
	// the family's conditioner and network (the registries' parts).
	Backend *native.Backend
	Weights *WeightSet
	Alloc   *native.Allocator
	Specs   []WeightSpec
	srcs    []*OpenSource // open until Close: streamed weights are read from them
	Cond    Conditioner
	Net     Network
	// Tokenizers hold each text encoder kind's tokenizer (encoderKind.tokenizer).
	Tokenizers map[string]any

	flowShift   float32 // LoadOptions.FlowShift
	partsInTurn bool    // LoadOptions.PartsInTurn with a budget

	imat      *ImatrixStats // collection target (SetImatrix), nil when off
	imatNames map[native.Tensor]imatWeight
	// ModelArgs are LoadOptions.ModelArgs, for the parts to read.
	ModelArgs map[string]string
}

// Load opens a model's component files (any format formats.Open detects;
// the format packages must be linked in), detects its family and
// configuration, and loads the weights into ggml.
func Load(c Components, opt LoadOptions) (_ *Model, err error) {
	if !Available {
		return nil, ErrNoCgo
	}
	if err := checkRuntime(opt.Runtime); err != nil {
		return nil, err
	}
	start := time.Now()
	srcs, err := openInputs(c)
	defer func() {
		if err != nil { // else the model reads weights as graphs need them, until Close
			closeSources(srcs)
		}
	}()
	if err != nil {
		return nil, err
	}
	main := c.Main()
	specs, cfg, err := detectModel(srcs, main, opt)
	if err != nil {
		return nil, err
	}
	fam, _ := FamilyByName(cfg.Family)
	if fam.VAE.BuiltinConvScale != 0 && c[family.FlagVAE] == "" {
		cfg.VAE.ConvScale = fam.VAE.BuiltinConvScale
	}
	specs = familyWeights(fam, specs)
	if opt.VAEDecodeOnly {
		specs = withoutVAEEncoder(specs, vaeKinds[cfg.VAE.Kind].EncoderParts)
		cfg.VAE.HasEncoder = false
	}
	var unused []string
	for _, s := range srcs {
		if !s.Comp.Whole() && !slices.ContainsFunc(specs, func(w WeightSpec) bool { return w.Component == s.Comp.Flag }) {
			unused = append(unused, "--"+s.Comp.Flag+" "+s.M.Path())
		}
	}
	toks, err := loadTokenizers(fam, cfg, opt, srcs, main)
	if err != nil {
		return nil, err
	}
	be, err := native.NewCPUBackend(opt.Threads)
	if err != nil {
		return nil, err
	}
	w, err := newWeightSet(be, main, specs, opt.MaxMemory)
	if err != nil {
		be.Free()
		return nil, err
	}
	w.Pager.baseHeld, w.Pager.rebudget, w.Pager.ceiling = opt.Held, opt.Rebudget, opt.MaxMemory
	w.Pager.resetHeld()
	model := &Model{Path: main, Components: c, Family: fam, Config: cfg, Tokenizers: toks, Backend: be, Weights: w,
		Alloc: be.NewAllocator(), Specs: specs, srcs: srcs, WeightBytes: w.Pager.stats.Weights, Unused: unused, ModelArgs: opt.ModelArgs,
		flowShift: opt.FlowShift, partsInTurn: opt.PartsInTurn && opt.MaxMemory > 0}
	for _, s := range specs {
		switch {
		case s.w8a8:
			model.W8A8Modules++
		case s.unscaledFP8:
			model.UnscaledFP8++
		}
	}
	if err := model.attachParts(opt); err != nil {
		model.Close()
		return nil, err
	}
	model.LoadTime = time.Since(start)
	return model, nil
}

func closeSources(srcs []*OpenSource) {
	for _, s := range srcs {
		s.M.Close()
	}
}

// openInputs opens the component files that are set, in the input table's
// order; the caller closes what it returns, also on error.
func openInputs(c Components) ([]*OpenSource, error) {
	var srcs []*OpenSource
	for _, ct := range family.GenerateInputs() {
		path := c[ct.Flag]
		if path == "" {
			continue
		}
		fm, err := formats.Open(path)
		if err != nil {
			return srcs, err
		}
		src, err := NewSource(ct, fm)
		if err != nil {
			fm.Close()
			return srcs, err
		}
		srcs = append(srcs, src)
	}
	if len(srcs) == 0 {
		return nil, errors.New("no model given (-m, or --diffusion-model with the text encoders and VAE)")
	}
	return srcs, nil
}

// detectModel selects the weights of the opened files and detects the
// family and configuration from them; an error in one component's weights
// names that component's file rather than main.
func detectModel(srcs []*OpenSource, main string, opt LoadOptions) ([]WeightSpec, *ModelConfig, error) {
	specs, err := SelectFrom(srcs, nil, opt)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range srcs {
		if s.Comp.Flag == family.FlagVAE && !hasVAE(specs, family.FlagVAE) {
			return nil, nil, fmt.Errorf("%s: no VAE tensors (encoder., decoder., post_quant_conv.)", s.M.Path())
		}
	}
	sh := map[string][]int64{}
	for _, s := range specs {
		sh[s.Name] = s.Shape
	}
	// Metadata overrides may sit in any component file; the first file
	// (in sd-cli's flag order) that has a key wins.
	var md formats.Metadata
	for _, s := range srcs {
		md = append(md, s.M.Metadata()...)
	}
	cfg, err := DetectConfig(sh, md)
	if err != nil {
		var ce *componentError
		if errors.As(err, &ce) {
			for _, s := range srcs {
				if s.Comp.Flag == ce.flag {
					main = s.M.Path()
				}
			}
		}
		return nil, nil, fmt.Errorf("%s: %w", main, err)
	}
	return specs, cfg, nil
}

// attachParts makes the family's network and conditioner for the loaded
// weights, checks its schedule is registered, and settles the prediction
// type (the option, else metadata or the family's, else a probe).
func (m *Model) attachParts(opt LoadOptions) error {
	fam, cfg := m.Family, m.Config
	var err error
	if m.Net, err = newNetwork(m); err != nil {
		return err
	}
	mk, ok := conditioners[fam.Conditioner]
	if !ok {
		return fmt.Errorf("%s: no conditioner %q in this build", fam.Title, fam.Conditioner)
	}
	if m.Cond, err = mk(m); err != nil {
		return err
	}
	if _, ok := schedules[fam.Schedule]; !ok {
		return fmt.Errorf("%s: no schedule %q in this build", fam.Title, fam.Schedule)
	}
	if opt.Prediction != "" {
		p, err := ParsePrediction(opt.Prediction)
		if err != nil {
			return err
		}
		cfg.Prediction, cfg.PredictionKnown = p, true
	}
	if !cfg.PredictionKnown {
		if cfg.Prediction, err = m.probePrediction(); err != nil {
			return err
		}
		cfg.PredictionKnown = true
	}
	return nil
}

// loadTokenizers loads the tokenizer of each text encoder kind the model
// has, in the order the family lists its encoders.
func loadTokenizers(fam *Family, cfg *ModelConfig, opt LoadOptions, srcs []*OpenSource, main string) (map[string]any, error) {
	out := map[string]any{}
	for _, e := range fam.Encoders {
		if _, done := out[e.Kind]; done {
			continue
		}
		var encs []EncoderConfig
		for _, f := range fam.Encoders {
			if ec, ok := cfg.Encoder(f.Component); ok && f.Kind == e.Kind {
				encs = append(encs, ec)
			}
		}
		kind := encoderKinds[e.Kind]
		if len(encs) == 0 || kind.Tokenizer == nil {
			continue
		}
		tok, err := kind.Tokenizer(opt, srcs, encs, main)
		if err != nil {
			return nil, err
		}
		out[e.Kind] = tok
	}
	return out, nil
}

// newNetwork makes the family's network for a loaded model.
func newNetwork(m *Model) (Network, error) {
	mk, ok := networks[m.Family.Network]
	if !ok {
		return nil, fmt.Errorf("%s: no network %q in this build", m.Family.Title, m.Family.Network)
	}
	return mk(m)
}

// hasVAE reports whether a VAE weight came from the component flag.
func hasVAE(specs []WeightSpec, flag string) bool {
	for _, s := range specs {
		if s.Component == flag && isVAEWeight(s.Name) {
			return true
		}
	}
	return false
}

// familyWeights keeps the weights a family's parts read: the diffusion
// model, the VAE and its encoders (an SD 1.x checkpoint's spare tensors,
// or a text encoder the family does not use, stay out of memory).
func familyWeights(f *Family, specs []WeightSpec) []WeightSpec {
	var keep []string
	for _, in := range family.GenerateInputs() {
		if in.Kind == family.KindDiffusion || in.Kind == family.KindVAE {
			keep = append(keep, in.Parts...)
		}
	}
	for _, e := range f.Encoders {
		keep = append(keep, e.Prefix)
	}
	out := specs[:0]
	for _, s := range specs {
		for _, p := range keep {
			if HasPrefix(s.Name, p) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// withoutVAEEncoder drops the weights of the VAE's encoder (parts: its
// kind's prefixes under first_stage_model.).
func withoutVAEEncoder(specs []WeightSpec, parts []string) []WeightSpec {
	out := specs[:0]
	for _, s := range specs {
		if !slices.ContainsFunc(parts, func(p string) bool { return HasPrefix(s.Name, VAEPfx+p) }) {
			out = append(out, s)
		}
	}
	return out
}

// isVAEWeight reports a tensor of some registered kind of VAE.
func isVAEWeight(name string) bool {
	for _, k := range vaeKinds {
		if k.IsWeight(name) {
			return true
		}
	}
	return false
}

// HasPrefix reports whether s starts with p.
func HasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// LinkedAVX2 reports whether the linked ggml's CPU kernels were compiled
// with AVX2 (without it, and FMA and F16C, inference is many times slower).
func LinkedAVX2() bool {
	avx2, _, _ := native.CPUFeatures()
	return avx2
}

// Close releases the model's ggml memory.
func (m *Model) Close() {
	m.Alloc.Free()
	m.Weights.Free()
	m.Backend.Free()
	closeSources(m.srcs)
	m.srcs = nil
}

// Memory says how the weights were held: the budget, what was resident
// and what was streamed so far.
func (m *Model) Memory() MemoryStats {
	if m.Weights.Pager == nil {
		return MemoryStats{}
	}
	return m.Weights.Pager.stats
}

// Release drops the weights held in memory and the compute buffer
// (another model is about to run); the next graph reads what it needs
// again. The compute buffer goes too because it only grows, to the
// largest graph run so far (the VAE decoder's at the image's size): kept,
// it sat outside the other model's budget (0.3 GiB at 256x256 on a Flux
// of full widths, where --compare's reference peaked that far above
// --max-memory).
func (m *Model) Release() error {
	m.Alloc.Free()
	m.Alloc = m.Backend.NewAllocator()
	if m.Weights.Pager == nil {
		return nil
	}
	return m.Weights.Pager.release()
}

// SetThreads changes the thread count.
func (m *Model) SetThreads(n int) { m.Backend.SetThreads(n) }

// ParamsByType counts the elements of each held type, per part (the
// input table's kinds: family.KindDiffusion, KindTextEncoder, KindVAE).
func (m *Model) ParamsByType() map[string]map[formats.DType]int64 {
	out := map[string]map[formats.DType]int64{}
	for _, s := range m.Specs {
		part := paramPart(s.Name)
		if out[part] == nil {
			out[part] = map[formats.DType]int64{}
		}
		n, _ := formats.Elements(s.Shape)
		out[part][s.Type] += n
	}
	return out
}

// paramPart names the part a weight belongs to: the kind of the input whose
// part holds it (family.KindVAE for anything else).
func paramPart(name string) string {
	for _, in := range family.GenerateInputs() {
		if in.Provides(name) {
			return in.Kind
		}
	}
	return family.KindVAE
}

// Input is an F32 or I32 graph input and its values.
type Input struct {
	// T is the input tensor; F32 or I32 its values.
	T   native.Tensor
	F32 []float32
	I32 []int32
}

// Compute builds a graph with build, allocates it, fills the inputs and
// runs it; read gets the outputs while the graph is alive.
func (m *Model) Compute(build func(g *Builder) ([]Input, native.Tensor), read func(out native.Tensor) error) (err error) {
	ctx, err := native.NewContext(4*GraphSize, GraphSize)
	if err != nil {
		return err
	}
	defer ctx.Free()
	g := &Builder{Ctx: ctx, Weights: m.Weights, imat: m.imatrixPass()}
	var ins []Input
	var out native.Tensor
	func() {
		defer native.Recover(&err)
		ins, out = build(g)
		ins = append(ins, g.Consts...)
		out = ctx.Cont(out).SetOutput()
	}()
	if err != nil {
		return fmt.Errorf("%s: %w", m.Path, err)
	}
	gr := ctx.NewGraph(GraphSize)
	g.imat.expand(gr)
	for _, t := range g.Expand {
		gr.Expand(t)
	}
	for _, t := range g.Outputs {
		gr.Expand(t)
	}
	gr.Expand(out)
	// A graph with ordered writes to state that outlives it (a video VAE's
	// caches) keeps ggml's order: reordering could move a write before
	// the read of the old values.
	if err := m.Weights.prepare(gr, len(g.Expand) == 0); err != nil {
		return err
	}
	if err := m.Alloc.Alloc(gr); err != nil {
		return err
	}
	for _, in := range ins {
		if in.I32 != nil {
			err = in.T.SetI32(in.I32)
		} else {
			err = in.T.SetF32(in.F32)
		}
		if err != nil {
			return err
		}
	}
	if err := m.Weights.run(m.Backend, gr, m.Alloc.Size()); err != nil {
		return err
	}
	if err := g.imat.read(); err != nil {
		return err
	}
	return read(out)
}

// NewInput makes an input tensor in g.
func NewInput(g *Builder, t formats.DType, ne ...int64) native.Tensor {
	x, err := g.Ctx.NewTensor(t, ne...)
	if err != nil {
		panic(&native.ShapeError{Msg: err.Error()})
	}
	return x.SetInput()
}

// Encode returns the conditioning of a (weighted) prompt for a
// width×height image, as the family's conditioner computes it.
func (m *Model) Encode(prompt string, width, height int) (*Conditioning, error) {
	return m.Cond.Encode(prompt, width, height, false)
}

// RunNet evaluates the diffusion network once; blocks, when not nil,
// receives every block's output.
func (m *Model) RunNet(in *NetInput, blocks *[]BlockOutput) ([]float32, error) {
	return m.runNetwork(m.Net, in, blocks)
}

// runNetwork is runNet with the given network (the model's, or its expert).
func (m *Model) runNetwork(net Network, in *NetInput, blocks *[]BlockOutput) ([]float32, error) {
	var out []float32
	var kept []BlockTensor
	in.Capture = blocks != nil
	err := m.Compute(func(g *Builder) ([]Input, native.Tensor) {
		y, ins, k := net.Build(g, in)
		kept = k
		return ins, y
	}, func(o native.Tensor) error {
		var err error
		if out, err = o.F32(); err != nil {
			return err
		}
		if om, ok := net.(outputMapper); ok {
			out = om.MapOutput(out, in)
		}
		for _, b := range kept {
			v, err := b.T.F32()
			if err != nil {
				return err
			}
			*blocks = append(*blocks, BlockOutput{Name: b.Name, Values: v})
			// Kept until the render ends, outside ggml's buffers (the 57
			// blocks of a Flux.1 dev, text tokens included, take hundreds
			// of MB), so the budget leaves room for them.
			m.Weights.Pager.hold(4 * int64(len(v)))
		}
		if len(kept) == 0 {
			return nil
		}
		return m.Weights.Pager.shed(m.Alloc.Size())
	})
	return out, err
}

// probePrediction tells eps from v as stable-diffusion.cpp does for SD 2.x:
// the network at t=999 on a constant 0.5 latent with a constant 0.5 context
// (and vector) predicts roughly the noise (mean(out - x) near 0) when it is
// an eps model, and a v model's output mean falls below -1.
func (m *Model) probePrediction() (Prediction, error) {
	mult := max(m.Net.Multiple(), 1)
	w := mult * max(1, (8+mult-1)/mult)
	h := w
	n := w * h * m.Net.Channels()
	x := make([]float32, n)
	for i := range x {
		x[i] = 0.5
	}
	cond := &Conditioning{Tokens: 2}
	for _, e := range m.Config.Encoders {
		cond.Dim += e.Width()
	}
	cond.Context = make([]float32, 2*cond.Dim)
	for i := range cond.Context {
		cond.Context[i] = 0.5
	}
	if u, ok := m.Config.Network.(VectorTaker); ok && u.VectorWidth() > 0 {
		cond.Vector = make([]float32, u.VectorWidth())
		for i := range cond.Vector {
			cond.Vector[i] = 0.5
		}
	}
	out, err := m.RunNet(&NetInput{X: x, W: w, H: h, T: 999, Cond: cond}, nil)
	if err != nil {
		return 0, err
	}
	var s float64
	for i := range out {
		s += float64(out[i]) - float64(x[i])
	}
	if s/float64(len(out)) < -1 {
		return VPrediction, nil
	}
	return EpsPrediction, nil
}

// DecodeLatent runs the VAE decoder on a diffusion latent [Z, h, w] and
// returns pixels [3, 8h, 8w], nominally in [-1, 1] (ImageFromCHW converts them).
func (m *Model) DecodeLatent(latent []float32, w, h int) ([]float32, error) {
	cfg := &m.Config.VAE
	z := make([]float32, len(latent))
	for i, v := range latent {
		z[i] = v/cfg.ScaleFactor + cfg.ShiftFactor
	}
	var out []float32
	err := m.Compute(func(g *Builder) ([]Input, native.Tensor) {
		g.convScale = cfg.ConvScale
		zt := NewInput(g, formats.F32, int64(w), int64(h), int64(cfg.ZChannels), 1)
		return []Input{{T: zt, F32: z}}, vaeKinds[cfg.Kind].Decode(g, cfg, zt)
	}, func(o native.Tensor) error {
		var err error
		out, err = o.F32()
		return err
	})
	return out, err
}

// EncodeImage runs the VAE encoder on pixels [3, H, W] in [-1, 1] (CHWFromImage) and
// returns the diffusion latent (the scaled and shifted mean) [Z, H/8, W/8].
func (m *Model) EncodeImage(pixels []float32, w, h int) ([]float32, error) {
	return m.EncodeLatent(pixels, w, h, nil)
}

// EncodeLatent is EncodeImage, or with eps (one value per latent element)
// a sample of the latent distribution, mean + std·eps with std =
// exp(logvar/2), logvar clamped to [-30, 20], as LDM's
// DiagonalGaussianDistribution.sample and stable-diffusion.cpp's img2img
// take it, then scaled and shifted.
func (m *Model) EncodeLatent(pixels []float32, w, h int, eps []float32) ([]float32, error) {
	cfg := &m.Config.VAE
	if !cfg.HasEncoder {
		return nil, fmt.Errorf("%s: the model has no VAE encoder (first_stage_model.encoder)", m.Path)
	}
	var moments []float32
	err := m.Compute(func(g *Builder) ([]Input, native.Tensor) {
		g.convScale = cfg.ConvScale
		it := NewInput(g, formats.F32, int64(w), int64(h), 3, 1)
		return []Input{{T: it, F32: pixels}}, vaeKinds[cfg.Kind].Encode(g, cfg, it)
	}, func(o native.Tensor) error {
		var err error
		moments, err = o.F32()
		return err
	})
	if err != nil {
		return nil, err
	}
	out, logvar := moments[:len(moments)/2], moments[len(moments)/2:]
	if vaeKinds[cfg.Kind].MeanOnly {
		out, logvar, eps = moments, nil, nil
	}
	if eps != nil && len(eps) != len(out) {
		return nil, fmt.Errorf("latent sample: %d noise values for %d latent values", len(eps), len(out))
	}
	for i := range out {
		v := out[i]
		if eps != nil {
			std := float32(math.Exp(float64(0.5 * min(max(logvar[i], -30), 20))))
			v += std * eps[i]
		}
		out[i] = (v - cfg.ShiftFactor) * cfg.ScaleFactor
	}
	return out, nil
}

// AlignSize returns the image size Generate uses for a request of w×h:
// each side rounded up to the network's spatial multiple (64 for SD's
// UNet), as sd-cli aligns a request and warns.
func (m *Model) AlignSize(w, h int) (int, int, int) {
	down := m.Family.VAE.down() * m.Net.Multiple()
	up := func(n int) int { return (n + down - 1) / down * down }
	return up(w), up(h), down
}

// guidedDenoiser is one sampling run's Denoiser: the network on the
// conditional and, with classifier-free guidance, the unconditional
// context, mixed by the guidance scale and turned into the denoised
// latent by the parameterisation.
type guidedDenoiser struct {
	m            *Model
	net          Network // m.net, or its high-noise expert
	cfgScale     float32
	pred         Prediction
	sched        Schedule
	req          *Request
	cond, uncond *Conditioning
	w, h, frames int
	in, den      []float32
	init         []float32      // image-to-video's init latent (Family.InitFirstFrame)
	held         int            // how many of its leading latent frames are held
	refs         []RefLatent    // the reference images' latents (Request.Refs)
	frameTs      []float32      // the per-frame timesteps passed to the network when frames are held
	capture      *[]BlockOutput // the first step's block outputs, when requested
	err          error          // the first network error (the sampler cannot return one)
}

func (d *guidedDenoiser) denoise(xs []float32, sigma float32) []float32 {
	_, _, cIn := d.pred.Scalings(sigma)
	for i, v := range xs {
		d.in[i] = v * cIn
	}
	call := &NetInput{X: d.in, W: d.w, H: d.h, Frames: d.frames, T: d.sched.SigmaToT(sigma), Cond: d.cond, Guidance: d.req.Guidance, Refs: d.refs}
	if d.held > 0 {
		d.hold(d.in)
		call.FrameT = d.frameT(call.T)
	}
	blocks := d.capture
	d.capture = nil
	out, err := d.m.runNetwork(d.net, call, blocks)
	if err != nil {
		d.err = err
		return nil
	}
	if d.uncond != nil && d.cfgScale != 1 {
		call.Cond = d.uncond
		u, err := d.m.runNetwork(d.net, call, nil)
		if err != nil {
			d.err = err
			return nil
		}
		Guide(out, u, d.cfgScale)
	}
	d.pred.Denoised(d.den, xs, out, sigma)
	if d.held > 0 {
		d.hold(d.den)
	}
	return d.den
}

// conditionings encodes the prompt and, when classifier-free guidance
// needs one (CFGScale != 1), the negative prompt.
func (m *Model) conditionings(req *Request) (cond, uncond *Conditioning, err error) {
	if cond, err = m.Cond.Encode(req.Prompt, req.Width, req.Height, false); err != nil {
		return nil, nil, err
	}
	if req.CFGScale != 1 || req.HighNoise != nil && req.HighNoise.CFGScale != 1 {
		zero := m.Family.EmptyNegativeZero && req.Negative == ""
		encode := m.Cond.Encode
		if nc, ok := m.Cond.(NegativeConditioner); ok {
			encode = nc.EncodeNegative
		}
		if uncond, err = encode(req.Negative, req.Width, req.Height, zero); err != nil {
			return nil, nil, err
		}
	}
	return cond, uncond, nil
}

// initLatent encodes img2img's init image into a sample of its latent
// distribution, n values.
func (m *Model) initLatent(req *Request, n int) ([]float32, error) {
	if len(req.Init) != 3*req.Width*req.Height {
		return nil, fmt.Errorf("init image has %d values, want %d", len(req.Init), 3*req.Width*req.Height)
	}
	// sd-cli seeds its generator, draws the encoder's sample from it,
	// then seeds it again for the starting noise: both start at the
	// seed, so the sample's noise is the starting noise.
	eps, err := NewRNG(req.RNG, req.Seed)
	if err != nil {
		return nil, err
	}
	e := make([]float32, n)
	eps.FillNormal(e)
	return m.EncodeLatent(req.Init, req.Width, req.Height, e)
}

// FlowShift returns the flow shift a shifted flow schedule uses: LoadOptions.FlowShift, else the family's.
func (m *Model) FlowShift() float32 {
	if m.flowShift != 0 {
		return m.flowShift
	}
	return m.Family.FlowShift
}

// schedule returns the model's noise schedule for a latent of w×h cells.
func (m *Model) schedule(w, h int) Schedule { return schedules[m.Family.Schedule](m, w, h) }

// sampleStage is a run of sampling steps with one network.
type sampleStage struct {
	Net      Network
	method   Method
	cfgScale float32
	Sigmas   []float32
}

// Stages splits sampling between the high-noise expert and the model's
// network as sd-cli does: the expert runs HighNoise.Steps steps (or, when
// that is below 0, the steps before the first sigma below the boundary),
// each with its own sampler and guidance scale.
func (m *Model) Stages(req *Request, sigmas []float32) []sampleStage {
	own := sampleStage{Net: m.Net, method: req.Method, cfgScale: req.CFGScale, Sigmas: sigmas}
	hn := req.HighNoise
	if hn == nil {
		return []sampleStage{own}
	}
	split := hn.Steps
	if split < 0 {
		split = 0
		for i, s := range sigmas {
			if s < hn.Boundary {
				split = i
				break
			}
		}
	}
	split = min(split, len(sigmas)-1)
	if split == 0 {
		return []sampleStage{own}
	}
	expert := sampleStage{Net: m.Net.(expertNetwork).HighNoise(), method: hn.Method, cfgScale: hn.CFGScale, Sigmas: sigmas[:split+1]}
	if split == len(sigmas)-1 {
		return []sampleStage{expert}
	}
	own.Sigmas = sigmas[split:]
	return []sampleStage{expert, own}
}

// settleHighNoise gives a model with a high-noise expert sd-cli's expert
// settings when the request has none, and refuses expert settings for a
// model without one.
func (m *Model) settleHighNoise(req *Request) error {
	var expert Network
	if e, ok := m.Net.(expertNetwork); ok {
		expert = e.HighNoise()
	}
	switch {
	case req.HighNoise != nil && expert == nil:
		return fmt.Errorf("%s: high-noise settings for a model without a high-noise expert", m.Path)
	case req.HighNoise == nil && expert != nil:
		hn := DefaultHighNoise
		req.HighNoise = &hn
	}
	if hn := req.HighNoise; hn != nil {
		cp := *hn
		if cp.Method == "" {
			cp.Method = m.Family.Defaults.Method
		}
		if !(cp.CFGScale >= 0 && cp.CFGScale < 1000) || cp.Steps > 1000 {
			return fmt.Errorf("high-noise cfg scale %g and steps %d must be in [0, 1000)", cp.CFGScale, cp.Steps)
		}
		req.HighNoise = &cp
	}
	return nil
}

// generate is Generate without the interrupt within a step (interrupt.go).
func (m *Model) generate(req Request) (*Result, error) {
	fam := m.Family
	if err := m.prepare(&req); err != nil {
		return nil, err
	}
	res := &Result{Width: req.Width, Height: req.Height}
	m.Weights.Pager.resetHeld() // the last render's captures are the caller's now
	t0 := time.Now()
	cond, uncond, err := m.conditionings(&req)
	if err != nil {
		if errors.Is(err, native.ErrAborted) {
			return nil, fmt.Errorf("%w %s", err, whileEncoding)
		}
		return nil, err
	}
	res.Timings.Text = time.Since(t0)
	refs, err := m.refLatents(&req)
	if err != nil {
		return nil, err
	}

	vae := &fam.VAE
	lw, lh := req.Width/vae.down(), req.Height/vae.down()
	lf := vae.LatentFrames(max(req.Frames, 1))
	n := lw * lh * max(lf, 1) * m.Net.Channels()
	noise, err := NewRNG(req.RNG, req.Seed)
	if err != nil {
		return nil, err
	}
	sched := m.schedule(lw, lh)
	total := req.Steps
	if req.HighNoise != nil {
		total += max(0, req.HighNoise.Steps)
	}
	sigmas, err := sched.Sigmas(req.Scheduler, total)
	if err != nil {
		return nil, err
	}
	var init []float32
	held := 0
	switch {
	case req.Init != nil && lf > 0:
		if init, err = m.firstFrameLatent(&req, lw, lh, lf); err != nil {
			return nil, err
		}
		held = 1 // sd-cli's image-to-video takes every sigma: no strength
	case req.Init != nil:
		if init, err = m.initLatent(&req, n); err != nil {
			return nil, err
		}
		sigmas = Img2ImgSigmas(sigmas, req.Strength)
	}
	pred := m.Config.Prediction
	x := make([]float32, n)
	noise.FillNormal(x)
	pred.NoiseLatent(x, init, x, sigmas[0])

	d := &guidedDenoiser{m: m, pred: pred, sched: sched, req: &req, cond: cond, uncond: uncond, w: lw, h: lh, frames: lf,
		in: make([]float32, n), den: make([]float32, n), init: init, held: held, refs: refs}
	if req.CaptureBlocks {
		d.capture = &res.Blocks
	}
	if err := m.nextPart(); err != nil { // the text encoders (and the VAE's encoder) are done
		return nil, err
	}
	t1 := time.Now()
	if err := m.sample(d, &req, x, sigmas, noise); err != nil {
		return nil, err
	}
	pred.InverseNoise(x, sigmas[len(sigmas)-1])
	res.Timings.Sampling = time.Since(t1)
	res.Timings.Steps = len(sigmas) - 1
	res.Latent = x
	if err := m.nextPart(); err != nil { // the network is done
		return nil, err
	}
	if err := m.decode(res, x, lw, lh, lf); err != nil {
		return nil, err
	}
	return res, nil
}

// nextPart drops the weights and compute buffer of the part that ran
// when the model holds its parts in turn (LoadOptions.PartsInTurn).
func (m *Model) nextPart() error {
	if !m.partsInTurn {
		return nil
	}
	return m.Release()
}

// prepare settles req: the high-noise expert's share, the family's sampler
// and schedule where none is given, the checks, and the size aligned as
// sd-cli aligns it (an init image must already be).
func (m *Model) prepare(req *Request) error {
	fam := m.Family
	if err := m.settleHighNoise(req); err != nil {
		return err
	}
	if req.Method == "" {
		req.Method = fam.Defaults.Method
	}
	if req.Scheduler == "" {
		req.Scheduler = fam.Defaults.Scheduler
	}
	if err := req.check(); err != nil {
		return err
	}
	if err := m.checkVideoInit(req); err != nil {
		return err
	}
	if err := m.checkRefs(req); err != nil {
		return err
	}
	if w, h, mult := m.AlignSize(req.Width, req.Height); w != req.Width || h != req.Height {
		if req.Init != nil {
			return fmt.Errorf("init image of %dx%d: width and height must be multiples of %d for this model", req.Width, req.Height, mult)
		}
		req.Width, req.Height = w, h // sd-cli's alignment (AlignSize); the caller says so
	}
	return nil
}

// sample runs the sampler over sigmas on x, stage after stage (the
// high-noise expert first), reporting steps and stopping when req's
// context is cancelled.
func (m *Model) sample(d *guidedDenoiser, req *Request, x []float32, sigmas []float32, noise NoiseSource) error {
	if err := req.interrupted(0, len(sigmas)-1); err != nil {
		return err
	}
	done := 0
	for _, st := range m.Stages(req, sigmas) {
		d.net, d.cfgScale = st.Net, st.cfgScale
		err := SamplePrediction(st.method, d.pred, d.denoise, x, st.Sigmas, noise, func(step, _ int, sigma float32, _ []float32) error {
			if req.OnStep != nil {
				req.OnStep(done+step, len(sigmas)-1)
			}
			return req.interrupted(done+step, len(sigmas)-1)
		})
		if d.err != nil {
			return d.err
		}
		if err != nil {
			return err
		}
		done += len(st.Sigmas) - 1
	}
	return nil
}

// decode decodes the latent x into res's pixels (a video's frames when lf
// is not 0) and counts their NaN values.
func (m *Model) decode(res *Result, x []float32, lw, lh, lf int) error {
	t2 := time.Now()
	res.Frames = 1
	var err error
	if lf > 0 {
		res.Pixels, res.Frames, err = m.DecodeVideo(x, lw, lh, lf)
	} else {
		res.Pixels, err = m.DecodeLatent(x, lw, lh)
	}
	if err != nil {
		return err
	}
	res.Timings.Decode = time.Since(t2)
	for _, v := range res.Pixels {
		if v != v {
			res.NaNPixels++
		}
	}
	return nil
}

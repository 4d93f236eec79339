package infer

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer/text"
	"github.com/sdtool/sdtool/native"
)

// Available reports whether this build can run inference (it needs cgo and ggml).
const Available = native.Available

// graphSize bounds the nodes of one graph (the full SD 1.5 UNet has about 2,500).
const graphSize = 16384

// Model is a loaded SD 1.x/2.x checkpoint ready to generate.
type Model struct {
	// Path is the model file.
	Path string
	// Config is the detected configuration.
	Config *ModelConfig
	// Tokenizer is the CLIP tokenizer in use.
	Tokenizer *text.CLIPTokenizer
	// LoadTime is how long loading took.
	LoadTime time.Duration

	be    *native.Backend
	w     *weightSet
	alloc *native.Allocator
	specs []weightSpec

	imat      *ImatrixStats // collection target (SetImatrix), nil when off
	imatNames map[native.Tensor]imatWeight
}

// Load opens an SD 1.x/2.x model (any format formats.Open detects; the
// format packages must be linked in) and loads its weights into ggml.
func Load(path string, opt LoadOptions) (_ *Model, err error) {
	if !Available {
		return nil, ErrNoCgo
	}
	start := time.Now()
	m, err := formats.Open(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	specs, err := selectWeights(m, nil)
	if err != nil {
		return nil, err
	}
	md := m.Metadata()
	if opt.VAE != "" {
		vm, err := formats.Open(opt.VAE)
		if err != nil {
			return nil, err
		}
		defer vm.Close()
		vspecs, err := selectWeights(vm, vaePrefix)
		if err != nil {
			return nil, err
		}
		// The VAE file's VAE replaces the checkpoint's own; anything else
		// in it (a whole checkpoint given as --vae) is ignored.
		kept := specs[:0]
		for _, s := range specs {
			if !hasPrefix(s.Name, vaePfx) {
				kept = append(kept, s)
			}
		}
		n := len(kept)
		for _, s := range vspecs {
			if isVAEWeight(s.Name) {
				kept = append(kept, s)
			}
		}
		if len(kept) == n {
			return nil, fmt.Errorf("%s: no VAE tensors (encoder., decoder., post_quant_conv.)", opt.VAE)
		}
		specs = kept
	}
	sh := map[string][]int64{}
	for _, s := range specs {
		sh[s.Name] = s.Shape
	}
	cfg, err := DetectConfig(sh, md)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tok, err := loadModelTokenizer(path, opt.Tokenizer, md)
	if err != nil {
		return nil, err
	}
	if tok.VocabSize() > cfg.CLIP.Vocab {
		return nil, fmt.Errorf("%s: the tokenizer has %d tokens, the text encoder's embedding %d rows", path, tok.VocabSize(), cfg.CLIP.Vocab)
	}
	be, err := native.NewCPUBackend(opt.Threads)
	if err != nil {
		return nil, err
	}
	w, err := loadWeights(be, path, specs)
	if err != nil {
		be.Free()
		return nil, err
	}
	model := &Model{Path: path, Config: cfg, Tokenizer: tok, be: be, w: w, alloc: be.NewAllocator(), specs: specs}
	if opt.Prediction != "" {
		p, err := ParsePrediction(opt.Prediction)
		if err != nil {
			model.Close()
			return nil, err
		}
		cfg.Prediction, cfg.PredictionKnown = p, true
	}
	if !cfg.PredictionKnown {
		if cfg.Prediction, err = model.detectPrediction(); err != nil {
			model.Close()
			return nil, err
		}
		cfg.PredictionKnown = true
	}
	model.LoadTime = time.Since(start)
	return model, nil
}

// isVAEWeight reports an AutoencoderKL tensor under first_stage_model.
func isVAEWeight(name string) bool {
	for _, p := range []string{"encoder.", "decoder.", "quant_conv.", "post_quant_conv."} {
		if hasPrefix(name, vaePfx+p) {
			return true
		}
	}
	return false
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// loadModelTokenizer takes --tokenizer when given, else the model's embedded merges.
func loadModelTokenizer(path, file string, md formats.Metadata) (*text.CLIPTokenizer, error) {
	if file != "" {
		return text.LoadCLIPTokenizer(file)
	}
	t, err := text.CLIPTokenizerFromMetadata(path, md)
	if errors.Is(err, text.ErrNoTokenizer) {
		return nil, fmt.Errorf("%w; pass --tokenizer with CLIP's tokenizer.json or merges (or embed one with `sdtool convert --tokenizer`)", err)
	}
	return t, err
}

// LinkedAVX2 reports whether the linked ggml's CPU kernels were compiled
// with AVX2 (without it, and FMA and F16C, inference is many times slower).
func LinkedAVX2() bool {
	avx2, _, _ := native.CPUFeatures()
	return avx2
}

// Close releases the model's ggml memory.
func (m *Model) Close() {
	m.alloc.Free()
	m.w.free()
	m.be.Free()
}

// SetThreads changes the thread count.
func (m *Model) SetThreads(n int) { m.be.SetThreads(n) }

// ParamsByType counts the elements of each held type, per part ("unet", "clip", "vae").
func (m *Model) ParamsByType() map[string]map[formats.DType]int64 {
	out := map[string]map[formats.DType]int64{}
	for _, s := range m.specs {
		part := "vae"
		switch {
		case hasPrefix(s.Name, unetPrefix):
			part = "unet"
		case hasPrefix(s.Name, "cond_stage_model."):
			part = "clip"
		}
		if out[part] == nil {
			out[part] = map[formats.DType]int64{}
		}
		n, _ := formats.Elements(s.Shape)
		out[part][s.Type] += n
	}
	return out
}

// input is an F32 or I32 graph input and its values.
type input struct {
	t   native.Tensor
	f32 []float32
	i32 []int32
}

// compute builds a graph with build, allocates it, fills the inputs and
// runs it; read gets the outputs while the graph is alive.
func (m *Model) compute(build func(g *builder) ([]input, native.Tensor), read func(out native.Tensor) error) (err error) {
	ctx, err := native.NewContext(4*graphSize, graphSize)
	if err != nil {
		return err
	}
	defer ctx.Free()
	g := &builder{c: ctx, w: m.w, imat: m.imatrixPass()}
	var ins []input
	var out native.Tensor
	func() {
		defer native.Recover(&err)
		ins, out = build(g)
		out = ctx.Cont(out).SetOutput()
	}()
	if err != nil {
		return fmt.Errorf("%s: %w", m.Path, err)
	}
	gr := ctx.NewGraph(graphSize)
	g.imat.expand(gr)
	gr.Expand(out)
	if err := m.alloc.Alloc(gr); err != nil {
		return err
	}
	for _, in := range ins {
		if in.i32 != nil {
			err = in.t.SetI32(in.i32)
		} else {
			err = in.t.SetF32(in.f32)
		}
		if err != nil {
			return err
		}
	}
	if err := m.be.Compute(gr); err != nil {
		return err
	}
	if err := g.imat.read(); err != nil {
		return err
	}
	return read(out)
}

// newInput makes an input tensor in g.
func newInput(g *builder, t formats.DType, ne ...int64) native.Tensor {
	x, err := g.c.NewTensor(t, ne...)
	if err != nil {
		panic(&native.ShapeError{Msg: err.Error()})
	}
	return x.SetInput()
}

// EncodeText runs the text encoder on a (weighted) prompt and returns the
// context [L, Hidden] flattened (L a multiple of 77) and L.
func (m *Model) EncodeText(prompt string) ([]float32, int, error) {
	c := &m.Config.CLIP
	pad := c.PadID
	if pad < 0 {
		pad = m.Tokenizer.EOS()
	}
	chunk := min(c.Positions, 77)
	ids, weights := m.Tokenizer.EncodeWeighted(prompt, chunk, pad)
	var out []float32
	for lo := 0; lo < len(ids); lo += chunk {
		ch := ids[lo : lo+chunk]
		idv := make([]int32, len(ch))
		for i, id := range ch {
			if id < 0 || id >= c.Vocab {
				return nil, 0, fmt.Errorf("token id %d outside the text encoder's %d rows", id, c.Vocab)
			}
			idv[i] = int32(id)
		}
		err := m.compute(func(g *builder) ([]input, native.Tensor) {
			t := newInput(g, formats.I32, int64(len(idv)))
			return []input{{t: t, i32: idv}}, g.clip(c, t)
		}, func(o native.Tensor) error {
			v, err := o.F32()
			if err != nil {
				return err
			}
			applyWeights(v, weights[lo:lo+chunk], c.Hidden)
			out = append(out, v...)
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return out, len(ids), nil
}

// applyWeights scales each token's hidden state by its prompt weight and
// then rescales the whole chunk so that its mean is unchanged, as
// stable-diffusion.cpp (after A1111) does.
func applyWeights(h []float32, w []float32, hidden int) {
	same := true
	for _, x := range w {
		if x != 1 {
			same = false
		}
	}
	if same {
		return
	}
	mean := func() float64 {
		var s float64
		for _, v := range h {
			s += float64(v)
		}
		return s / float64(len(h))
	}
	before := mean()
	for i := range w {
		for j := 0; j < hidden; j++ {
			h[i*hidden+j] *= w[i]
		}
	}
	after := mean()
	if after == 0 {
		return
	}
	f := float32(before / after)
	for i := range h {
		h[i] *= f
	}
}

// runUNet evaluates the UNet once; blocks, when not nil, receives every
// block's output.
func (m *Model) runUNet(x []float32, w, h int, t float32, ctx []float32, ctxLen int, blocks *[]BlockOutput) ([]float32, error) {
	cfg := &m.Config.UNet
	var out []float32
	var kept []blockTensor
	err := m.compute(func(g *builder) ([]input, native.Tensor) {
		xt := newInput(g, formats.F32, int64(w), int64(h), int64(cfg.InChannels), 1)
		tt := newInput(g, formats.F32, 1)
		ct := newInput(g, formats.F32, int64(cfg.ContextDim), int64(ctxLen), 1)
		var y native.Tensor
		y, kept = g.unet(cfg, xt, tt, ct, blocks != nil)
		return []input{{t: xt, f32: x}, {t: tt, f32: []float32{t}}, {t: ct, f32: ctx}}, y
	}, func(o native.Tensor) error {
		var err error
		if out, err = o.F32(); err != nil {
			return err
		}
		for _, b := range kept {
			v, err := b.t.F32()
			if err != nil {
				return err
			}
			*blocks = append(*blocks, BlockOutput{Name: b.name, Values: v})
		}
		return nil
	})
	return out, err
}

// detectPrediction tells eps from v for SD 2.x as stable-diffusion.cpp
// does: the UNet at t=999 on a constant 0.5 latent with a constant 0.5
// context predicts roughly the noise (mean(out - x) near 0) when it is an
// eps model, and a v model's output mean falls below -1.
func (m *Model) detectPrediction() (Prediction, error) {
	cfg := &m.Config.UNet
	n := 8 * 8 * cfg.InChannels
	x := make([]float32, n)
	for i := range x {
		x[i] = 0.5
	}
	c := make([]float32, 2*cfg.ContextDim)
	for i := range c {
		c[i] = 0.5
	}
	out, err := m.runUNet(x, 8, 8, 999, c, 2, nil)
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

// DecodeLatent runs the VAE decoder on a latent [Z, h, w] and returns
// pixels [3, 8h, 8w], nominally in [-1, 1] (ImageFromCHW converts them).
func (m *Model) DecodeLatent(latent []float32, w, h int) ([]float32, error) {
	cfg := &m.Config.VAE
	z := make([]float32, len(latent))
	for i, v := range latent {
		z[i] = v / cfg.ScaleFactor
	}
	var out []float32
	err := m.compute(func(g *builder) ([]input, native.Tensor) {
		zt := newInput(g, formats.F32, int64(w), int64(h), int64(cfg.ZChannels), 1)
		return []input{{t: zt, f32: z}}, g.vaeDecode(cfg, zt)
	}, func(o native.Tensor) error {
		var err error
		out, err = o.F32()
		return err
	})
	return out, err
}

// EncodeImage runs the VAE encoder on pixels [3, H, W] in [-1, 1] (CHWFromImage) and
// returns the scaled latent mean [Z, H/8, W/8] (img2img).
func (m *Model) EncodeImage(pixels []float32, w, h int) ([]float32, error) {
	cfg := &m.Config.VAE
	if !cfg.HasEncoder {
		return nil, fmt.Errorf("%s: the model has no VAE encoder (first_stage_model.encoder)", m.Path)
	}
	in := pixels
	var out []float32
	err := m.compute(func(g *builder) ([]input, native.Tensor) {
		it := newInput(g, formats.F32, int64(w), int64(h), 3, 1)
		return []input{{t: it, f32: in}}, g.vaeEncode(cfg, it)
	}, func(o native.Tensor) error {
		var err error
		out, err = o.F32()
		return err
	})
	for i := range out {
		out[i] *= cfg.ScaleFactor
	}
	return out, err
}

// Generate runs text-to-image (or image-to-image with req.Init) sampling
// and decodes the result.
func (m *Model) Generate(req Request) (*Result, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	down := 8 << (len(m.Config.UNet.ChannelMult) - 1) // pixels per latent cell times UNet downsampling
	if req.Width%down != 0 || req.Height%down != 0 {
		return nil, fmt.Errorf("width and height must be multiples of %d for this model (got %dx%d)", down, req.Width, req.Height)
	}
	res := &Result{Width: req.Width, Height: req.Height}
	t0 := time.Now()
	cond, condLen, err := m.EncodeText(req.Prompt)
	if err != nil {
		return nil, err
	}
	var uncond []float32
	var uncondLen int
	if req.CFGScale != 1 {
		if uncond, uncondLen, err = m.EncodeText(req.Negative); err != nil {
			return nil, err
		}
	}
	res.Timings.Text = time.Since(t0)

	lw, lh := req.Width/8, req.Height/8
	zc := m.Config.UNet.InChannels
	n := lw * lh * zc
	noise, err := NewRNG(req.RNG, req.Seed)
	if err != nil {
		return nil, err
	}
	sched := SDNoiseSchedule()
	sigmas, err := sched.Sigmas(req.Scheduler, req.Steps)
	if err != nil {
		return nil, err
	}
	var init []float32
	if req.Init != nil {
		if len(req.Init) != 3*req.Width*req.Height {
			return nil, fmt.Errorf("init image has %d values, want %d", len(req.Init), 3*req.Width*req.Height)
		}
		if init, err = m.EncodeImage(req.Init, req.Width, req.Height); err != nil {
			return nil, err
		}
		sigmas = Img2ImgSigmas(sigmas, req.Strength)
	}
	x := make([]float32, n)
	noise.FillNormal(x)
	NoiseLatent(x, init, x, sigmas[0])

	pred := m.Config.Prediction
	in := make([]float32, n)
	den := make([]float32, n)
	var denErr error
	first := true
	denoise := func(xs []float32, sigma float32) []float32 {
		_, _, cIn := pred.Scalings(sigma)
		for i, v := range xs {
			in[i] = v * cIn
		}
		t := sched.SigmaToT(sigma)
		var blocks *[]BlockOutput
		if first && req.CaptureBlocks {
			blocks = &res.Blocks
		}
		first = false
		out, err := m.runUNet(in, lw, lh, t, cond, condLen, blocks)
		if err != nil {
			denErr = err
			return nil
		}
		if uncond != nil {
			u, err := m.runUNet(in, lw, lh, t, uncond, uncondLen, nil)
			if err != nil {
				denErr = err
				return nil
			}
			Guide(out, u, req.CFGScale)
		}
		pred.Denoised(den, xs, out, sigma)
		return den
	}
	t1 := time.Now()
	if err := req.interrupted(0, len(sigmas)-1); err != nil {
		return nil, err
	}
	err = Sample(req.Method, denoise, x, sigmas, noise, func(step, steps int, sigma float32, _ []float32) error {
		if req.OnStep != nil {
			req.OnStep(step, steps)
		}
		return req.interrupted(step, steps)
	})
	if denErr != nil {
		return nil, denErr
	}
	if err != nil {
		return nil, err
	}
	res.Timings.Sampling = time.Since(t1)
	res.Timings.Steps = len(sigmas) - 1
	res.Latent = x
	t2 := time.Now()
	if res.Pixels, err = m.DecodeLatent(x, lw, lh); err != nil {
		return nil, err
	}
	res.Timings.Decode = time.Since(t2)
	for _, v := range res.Pixels {
		if math.IsNaN(float64(v)) {
			return nil, fmt.Errorf("%s: the decoded image has NaN values", m.Path)
		}
	}
	return res, nil
}

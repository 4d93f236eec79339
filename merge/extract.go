package merge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/internal/workpool"
	"github.com/sdtool/sdtool/lora"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// ExtractOptions describe `sdtool lora extract`: the difference of two
// checkpoints as a kohya-format LoRA.
type ExtractOptions struct {
	// Base and Tuned are the checkpoints; the LoRA is Tuned − Base.
	Base, Tuned string
	// Output is the adapter to write (.safetensors, or .gguf).
	Output string
	// Rank keeps this many singular values per layer; zero selects Energy.
	Rank int
	// Energy keeps, per layer, the fewest singular values whose squares
	// reach this share of the difference's (0 < Energy ≤ 1), up to MaxRank.
	Energy float64
	// MaxRank caps the rank Energy may choose (0: 128).
	MaxRank int
	// Type is the factors' type: "" or f16, bf16, f32.
	Type string
	// SDCppOnly leaves out the layers stable-diffusion.cpp's LoRA loader
	// cannot map to a tensor (Flux's img_in, SD's conv_in, ...), which a
	// ComfyUI user would keep.
	SDCppOnly bool
	// Filters keep only the layers whose kohya module or tensor name one of
	// them matches (none: every layer).
	Filters []*regexp.Regexp
	// Threads is the number of layers decomposed at once (0: all cores).
	Threads int
	// MaxMemory bounds the memory of the layers decomposed at once (each
	// needs its dense difference and the sketch's matrices; 0: 1 GiB): a
	// layer that needs more on its own is refused before any work, and
	// fewer layers run at once when large ones would pass it.
	MaxMemory int64
	// Seed seeds the randomized sketch.
	Seed uint64
	// Log receives warnings; nil discards them.
	Log *slog.Logger
}

// ExtractedLayer is the account of one layer of an extraction.
type ExtractedLayer struct {
	// Module is the kohya module name.
	Module string `json:"module"`
	// Tensors are the checkpoint tensors it is made of ("name" or
	// "name[rows a-b]" for part of a fused tensor).
	Tensors []string `json:"tensors"`
	// Rows and Inner are the layer's matrix: Rows rows shaped Inner.
	Rows  int64   `json:"rows"`
	Inner []int64 `json:"inner"`
	// Conv reports a convolution (LoCon).
	Conv bool `json:"conv"`
	// SDCpp reports whether stable-diffusion.cpp maps the module back.
	SDCpp bool `json:"sdcpp"`
	// Status is "extracted", "unchanged" (the checkpoints agree: nothing
	// written) or "planned" (a dry run).
	Status string `json:"status"`
	// Rank is the rank written (the planned rank in a dry run with a fixed
	// rank; 0 for an energy share before decomposing).
	Rank int `json:"rank"`
	// Kept is the share of the difference's squared norm the rank keeps,
	// and Norm the difference's Frobenius norm (both 0 until extracted).
	Kept float64 `json:"kept"`
	Norm float64 `json:"norm"`
}

// Extraction is an extraction in progress: the layers planned, then (after
// Run) their factors, held in a spill file next to the output until the
// output is written.
type Extraction struct {
	// Layers are the layers extracted, in the checkpoints' order.
	Layers []ExtractedLayer
	// Skipped lists what is not extracted and why (tensors in one
	// checkpoint only, layers sd.cpp cannot load with SDCppOnly, ...).
	Skipped []string
	// Inputs are the files read.
	Inputs []string

	opts     ExtractOptions
	dtype    formats.DType
	plan     []lora.ExtractLayer
	work     []int64 // per layer, the base's bytes it decomposes
	a, b     formats.Model
	closers  []formats.Model
	spill    *os.File
	unlinked bool // the spill file's name is already removed
	mu       sync.Mutex
	spillEnd int64
	outs     [][]spilled // per layer, its tensors in the spill file
	ran      bool
}

// spilled is one output tensor in the spill file.
type spilled struct {
	name  string
	typ   formats.DType
	shape []int64
	off   int64
}

// OpenExtract opens both checkpoints and plans the layers; nothing is
// computed yet.
func OpenExtract(o *ExtractOptions) (_ *Extraction, err error) {
	switch {
	case o.Base == "" || o.Tuned == "":
		return nil, option.Errorf("extract needs %s A and %s B", option.Name("Base"), option.Name("Tuned"))
	case o.Rank < 0:
		return nil, option.Errorf("%s %d is negative", option.Name("Rank"), o.Rank)
	case o.Rank > 0 && o.Energy != 0:
		return nil, option.Errorf("%s and %s exclude each other", option.Name("Rank"), option.Name("Energy"))
	case o.Rank == 0 && !(o.Energy > 0 && o.Energy <= 1):
		return nil, option.Errorf("give %s R or %s in (0, 1], not %v", option.Name("Rank"), option.Name("Energy"), o.Energy)
	case o.MaxRank < 0:
		return nil, option.Errorf("%s %d is negative", option.Name("MaxRank"), o.MaxRank)
	}
	dt, set, err := ParseFloatDType(o.Type)
	if err != nil {
		return nil, option.Errorf("%s %q: the factors are f16, bf16 or f32", option.Name("Type"), o.Type)
	}
	if !set {
		dt = formats.F16
	}
	e := &Extraction{opts: *o, dtype: dt}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	open := func(path string) (formats.Model, error) {
		m, err := formats.Open(path)
		if err != nil {
			return nil, err
		}
		e.closers = append(e.closers, m)
		e.Inputs = append(e.Inputs, inputFiles(m)...)
		// ComfyUI int8/fp8 checkpoints are compared as their decoded floats.
		d, _, err := tensor.Dequantized(m)
		return d, err
	}
	if e.a, err = open(o.Base); err != nil {
		return nil, err
	}
	if e.b, err = open(o.Tuned); err != nil {
		return nil, err
	}
	v, prefix := lora.DetectBase(e.a.Tensors())
	plan, err := lora.PlanExtract(e.a.Tensors(), e.b.Tensors(), v, prefix)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", o.Base, o.Tuned, err)
	}
	e.Skipped = plan.Skipped
	rows, size := map[string]int64{}, map[string]int64{}
	for _, t := range e.a.Tensors() {
		if len(t.Shape) > 0 {
			rows[t.Name], size[t.Name] = t.Shape[0], t.Size
		}
	}
	for _, l := range plan.Layers {
		switch {
		case o.SDCppOnly && !l.SDCpp:
			e.Skipped = append(e.Skipped, fmt.Sprintf("%s: stable-diffusion.cpp cannot load it (--sdcpp-only)", l.Module))
			continue
		case len(o.Filters) > 0 && !layerMatches(l, o.Filters):
			continue
		}
		e.plan = append(e.plan, l)
		var w int64
		for _, src := range l.Sources {
			if r := rows[src.Name]; r > 0 {
				w += size[src.Name] / r * src.Rows
			}
		}
		e.work = append(e.work, max(w, 1))
		r := l.Rank(lora.ExtractOptions{Rank: o.Rank})
		e.Layers = append(e.Layers, ExtractedLayer{Module: l.Module, Tensors: sourceNames(l, rows), Rows: l.Rows, Inner: l.Inner,
			Conv: l.Conv(), SDCpp: l.SDCpp, Status: "planned", Rank: r})
	}
	if len(e.plan) == 0 {
		return nil, fmt.Errorf("%s and %s: no layer to extract", o.Base, o.Tuned)
	}
	e.outs = make([][]spilled, len(e.plan))
	return e, nil
}

func layerMatches(l lora.ExtractLayer, res []*regexp.Regexp) bool {
	for _, re := range res {
		if re.MatchString(l.Module) {
			return true
		}
		for _, s := range l.Sources {
			if re.MatchString(s.Name) {
				return true
			}
		}
	}
	return false
}

// sourceNames names a layer's tensors, with the rows it takes of a tensor
// it does not take whole (one part of a fused tensor).
func sourceNames(l lora.ExtractLayer, rows map[string]int64) []string {
	var out []string
	for _, s := range l.Sources {
		if s.Row0 == 0 && s.Rows == rows[s.Name] {
			out = append(out, s.Name)
		} else {
			out = append(out, fmt.Sprintf("%s[rows %d-%d]", s.Name, s.Row0, s.Row0+s.Rows-1))
		}
	}
	return out
}

// Work returns the total work of Run in the units its progress reports:
// the bytes of the base's weights that the layers decompose.
func (e *Extraction) Work() int64 {
	var n int64
	for _, w := range e.work {
		n += w
	}
	return n
}

// Run decomposes every layer (Threads at a time), skipping those the
// checkpoints agree on, and keeps the encoded factors in a spill file
// beside the output. progress, when set, gets the bytes done and the total
// (see Work). It stops at the next layer when ctx is cancelled.
func (e *Extraction) Run(ctx context.Context, progress func(done, total int64)) error {
	if e.ran {
		return errors.New("extraction already run")
	}
	e.ran = true
	dir := filepath.Dir(e.opts.Output)
	f, err := os.CreateTemp(dir, "."+filepath.Base(e.opts.Output)+".factors-*")
	if err != nil {
		return fmt.Errorf("spill file for the factors: %w", err)
	}
	e.spill = f
	// Unlinked at once where the system allows it (not Windows), so that
	// no kill, not even for memory, can leave it beside the output.
	e.unlinked = os.Remove(f.Name()) == nil
	budget := e.opts.MaxMemory
	if budget <= 0 {
		budget = 1 << 30
	}
	for i := range e.plan {
		if n := e.layerMemory(i); n > budget {
			l := &e.plan[i]
			return option.Errorf("%s: layer %s (%d x %d) needs about %s to decompose, more than the memory bound %s (%s); raise it or leave the layer out (%s)",
				e.opts.Output, l.Module, l.Rows, l.Cols(), pipeline.HumanBytes(n), pipeline.HumanBytes(budget), option.Name("MaxMemory"), option.Name("Filters"))
		}
	}
	mem := newByteSemaphore(budget)
	threads := e.opts.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	total := e.Work()
	var done atomic.Int64
	opt := lora.ExtractOptions{Rank: e.opts.Rank, Energy: e.opts.Energy, MaxRank: e.opts.MaxRank, Seed: e.opts.Seed, Workers: 1}
	if threads > len(e.plan) {
		opt.Workers = (threads + len(e.plan) - 1) / len(e.plan)
	}
	errs := make([]error, len(e.plan))
	// Every layer runs even after one fails, so that the error names them all.
	cancelled := workpool.Each(ctx, len(e.plan), threads, func(_, i int) error {
		need := e.layerMemory(i)
		mem.acquire(need)
		errs[i] = e.layer(i, opt)
		mem.release(need)
		n := done.Add(e.work[i])
		if progress != nil {
			progress(n, total)
		}
		return nil
	})
	if cancelled != nil {
		cause := context.Cause(ctx)
		what := ""
		if cause != nil && cause != context.Canceled {
			what = " (" + cause.Error() + ")"
		}
		return fmt.Errorf("%s: %w%s while decomposing; nothing written", e.opts.Output, pipeline.ErrInterrupted, what)
	}
	return errors.Join(errs...)
}

// layerMemory estimates the bytes layer i takes while it is decomposed:
// its dense float32 difference and the randomized SVD's float64 matrices
// (a few of rows or columns by rank plus oversampling).
func (e *Extraction) layerMemory(i int) int64 {
	l := &e.plan[i]
	k := int64(e.opts.Rank)
	if k == 0 {
		k = int64(e.opts.MaxRank)
		if k == 0 {
			k = 128
		}
	}
	k = min(k, l.Rows, l.Cols()) + 8
	return 4*l.Rows*l.Cols() + 24*(l.Rows+l.Cols())*k
}

// byteSemaphore admits work while the bytes it holds stay within a
// budget; one item larger than the budget is admitted alone.
type byteSemaphore struct {
	mu         sync.Mutex
	cond       *sync.Cond
	held, size int64
}

func newByteSemaphore(size int64) *byteSemaphore {
	s := &byteSemaphore{size: size}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *byteSemaphore) acquire(n int64) {
	s.mu.Lock()
	for s.held > 0 && s.held+n > s.size {
		s.cond.Wait()
	}
	s.held += n
	s.mu.Unlock()
}

func (s *byteSemaphore) release(n int64) {
	s.mu.Lock()
	s.held -= n
	s.mu.Unlock()
	s.cond.Broadcast()
}

// layer extracts layer i into the spill file.
func (e *Extraction) layer(i int, opt lora.ExtractOptions) error {
	l := &e.plan[i]
	rep := &e.Layers[i]
	differs, err := l.Differs(e.a, e.b)
	if err != nil {
		return err
	}
	if !differs {
		rep.Status, rep.Rank, rep.Kept = "unchanged", 0, 1
		return nil
	}
	d, err := l.Diff(e.a, e.b)
	if err != nil {
		return err
	}
	dec, err := lora.Decompose(d, int(l.Rows), int(l.Cols()), l.Module, opt)
	if err != nil {
		return err
	}
	ts, err := l.Tensors(dec, e.dtype)
	if err != nil {
		return err
	}
	rep.Status, rep.Rank, rep.Kept, rep.Norm = "extracted", dec.Rank, dec.Kept, dec.Norm
	if len(ts) == 0 {
		// A difference of rank 0 within the energy share: nothing to write.
		rep.Status = "unchanged"
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range ts {
		if _, err := e.spill.WriteAt(t.Data, e.spillEnd); err != nil {
			return fmt.Errorf("spill file: %w", err)
		}
		e.outs[i] = append(e.outs[i], spilled{name: t.Name, typ: t.Type, shape: t.Shape, off: e.spillEnd})
		e.spillEnd += int64(len(t.Data))
	}
	return nil
}

// PlanOutput plans the adapter file from the spilled factors (after Run):
// each extracted layer's lora_up, lora_down and alpha, in layer order, and
// kohya's ss_network_* metadata.
func (e *Extraction) PlanOutput() (*pipeline.Plan, error) {
	if e.spill == nil {
		return nil, errors.New("extraction not run")
	}
	p, err := newPlan(e.opts.Output)
	if err != nil {
		return nil, err
	}
	p.Inputs = append(p.Inputs, e.Inputs...)
	for i, outs := range e.outs {
		for _, s := range outs {
			s := s
			p.Outputs = append(p.Outputs, pipeline.Output{Name: s.name, Type: s.typ, Shape: s.shape, Note: e.Layers[i].Module,
				Producer: pipeline.ProducerFunc(func(_ context.Context, dst []byte, first, n int64, _ *tensor.Scratch) error {
					if n <= 0 {
						return nil
					}
					rb := int64(len(dst)) / n
					_, err := e.spill.ReadAt(dst, s.off+first*rb)
					return err
				})})
		}
	}
	if len(p.Outputs) == 0 {
		return nil, fmt.Errorf("%s and %s do not differ in any extracted layer: no adapter to write", e.opts.Base, e.opts.Tuned)
	}
	dim, alpha := "dynamic", "dynamic"
	if e.opts.Rank > 0 {
		dim, alpha = strconv.Itoa(e.opts.Rank), strconv.Itoa(e.opts.Rank)
	}
	desc := fmt.Sprintf("method=extract base=%s tuned=%s", filepath.Base(e.opts.Base), filepath.Base(e.opts.Tuned))
	if e.opts.Rank > 0 {
		desc += fmt.Sprintf(" rank=%d", e.opts.Rank)
	} else {
		desc += fmt.Sprintf(" energy=%g max_rank=%d", e.opts.Energy, e.maxRank())
	}
	p.Header.Metadata = stringMetadata(map[string]string{
		"ss_network_module": "networks.lora",
		"ss_network_dim":    dim,
		"ss_network_alpha":  alpha,
		"sdtool.extract":    desc,
	})
	if p.Format.Name == "gguf" {
		p.Header.PadEnd = true
	}
	pipeline.FoldHighDims(p)
	if err := p.Check(); err != nil {
		return nil, err
	}
	return p, nil
}

func (e *Extraction) maxRank() int {
	if e.opts.MaxRank > 0 {
		return e.opts.MaxRank
	}
	return 128
}

// Kept returns the share of the whole difference (all extracted layers)
// that the written factors keep.
func (e *Extraction) Kept() float64 {
	var num, den float64
	for _, l := range e.Layers {
		if l.Status == "extracted" {
			num += l.Kept * l.Norm * l.Norm
			den += l.Norm * l.Norm
		}
	}
	if den == 0 {
		return 1
	}
	return num / den
}

// Close closes the checkpoints and removes the spill file.
func (e *Extraction) Close() error {
	var errs []error
	for _, m := range e.closers {
		errs = append(errs, m.Close())
	}
	e.closers = nil
	if e.spill != nil {
		errs = append(errs, e.spill.Close())
		if !e.unlinked {
			errs = append(errs, os.Remove(e.spill.Name()))
		}
		e.spill = nil
	}
	return errors.Join(errs...)
}

package quantize

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/quant/mix"
)

// Budget asks quantize to choose the type of every eligible tensor so that
// the output fits a size with the least measured error (--budget, --bpw).
type Budget struct {
	// Bytes is the largest output file, header included; 0 when BPW is used.
	Bytes int64
	// BPW is the largest bits per weight over every tensor's data (the
	// summary's figure); 0 when Bytes is used.
	BPW float64
	// Candidates are the types tried for each eligible tensor (nil:
	// DefaultCandidates); a type whose block does not divide a tensor's
	// rows is not tried for it.
	Candidates []formats.DType
	// Metric is MetricRelative (the default) or MetricAbsolute.
	Metric string
	// Threads measure tensors in parallel (0: every core); the answer does
	// not depend on it.
	Threads int
	// Context stops the measurement when cancelled (nil: never); the error
	// then wraps pipeline.ErrInterrupted and says how far it got.
	Context context.Context
	// Progress, when set, is called as the measurement goes (from several
	// goroutines) with the bytes of the input measured and their total.
	Progress func(done, total int64)
	// Start, when set, is called once before the measurement with the
	// number of tensors and the input bytes it reads.
	Start func(tensors int, bytes int64)
}

// Error metrics of a Budget.
const (
	// MetricRelative counts each tensor's squared error over its squared
	// weights (importance-weighted by columns with an imatrix: the
	// relative error of the layer's output), so every layer weighs alike.
	MetricRelative = "relative"
	// MetricAbsolute counts the squared error itself (with an imatrix, the
	// expected squared error of the layer's output).
	MetricAbsolute = "absolute"
)

// DefaultCandidates are the types a budget tries: the k-quants and the
// 32-element legacy and non-linear types (for rows that 256 does not
// divide), q8_0 and f16, all of which sd.cpp and ComfyUI-GGUF load.
var DefaultCandidates = []formats.DType{
	formats.Q2_K, formats.Q3_K, formats.Q4_K, formats.Q5_K, formats.Q6_K,
	formats.IQ4_NL, formats.Q4_0, formats.Q4_1, formats.Q5_0, formats.Q5_1, formats.Q8_0, formats.F16,
}

// budgetMixBase is the mix a budget plans with: it decides which tensors
// are eligible and the types of the others (every quantized mix agrees).
const budgetMixBase = "q8_0"

// BudgetReport is what a budget chose and why.
type BudgetReport struct {
	// Limit is the byte budget (0 with BPW), BPW the bits-per-weight one.
	Limit int64
	BPW   float64
	// Metric is the error the allocation minimised.
	Metric string
	// FileBytes is the predicted output size, header included; DataBytes
	// the tensor data without padding (what bits per weight count).
	FileBytes, DataBytes int64
	// Error is the predicted value of what the allocation minimised (in
	// Metric's units: the sum over the allocated tensors of their squared
	// relative errors, or of their squared errors). RelError is the
	// relative error ‖a−b‖/‖a‖ of the allocated tensors taken as one
	// vector, as sdtool diff defines it (importance-weighted by column with
	// an imatrix): the figure to compare with diff and with the Mixes.
	Error, RelError float64
	// Optimal reports that no assignment of at most the chosen bytes has
	// less predicted error (the greedy stopped at a breakpoint).
	Optimal bool
	// Tensors lists the eligible tensors in plan order.
	Tensors []BudgetTensor
	// Mixes are the fixed mixes whose every type was measured, as the
	// same measurement prices them, for comparison.
	Mixes []MixPrice
	// Measured counts the elements measured and Elapsed the time it took.
	Measured int64
	Elapsed  time.Duration
}

// MixPrice is a fixed mix's predicted file size and error.
type MixPrice struct {
	Name      string
	FileBytes int64
	// Error and RelError are BudgetReport's, for this mix's types.
	Error, RelError float64
}

// comparedMixes are the mixes a budget prices beside its own choice.
var comparedMixes = []string{"Q3_K_M", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"}

// priceMixes predicts each compared mix's size and error from the
// measurements, when every type the mix picks for an allocated tensor was
// measured for it.
func (b *builder) priceMixes(inputs []mix.Input, elig []budgetTensor, meas []measured, fileFixed int64) []MixPrice {
	var out []MixPrice
	for _, name := range comparedMixes {
		f, err := mix.Parse(name)
		if err != nil {
			continue
		}
		choices, err := mix.Choose(f, inputs, mix.Options{Arch: b.arch, Layout: b.layout, ReshapeConv: b.opts.ReshapeConv})
		if err != nil {
			continue
		}
		p := MixPrice{Name: name, FileBytes: fileFixed}
		ok := true
		var sse, energy float64
		for i, e := range elig {
			if e.pinned {
				continue
			}
			found := false
			for _, c := range meas[i].cands {
				if c.Type == choices[e.index].Type {
					p.FileBytes += align32(c.Bytes)
					p.Error += c.Err
					sse += c.SSE
					found = true
				}
			}
			energy += meas[i].energy
			ok = ok && found
		}
		if energy > 0 {
			p.RelError = math.Sqrt(sse / energy)
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

// BudgetTensor is one eligible tensor's choice.
type BudgetTensor struct {
	Name string
	Type formats.DType
	// Pinned marks a type given by the user's rules, not allocated.
	Pinned bool
	// Bytes and Err are the chosen candidate's size and predicted error.
	Bytes int64
	Err   float64
	// Candidates are the types measured, with their sizes and errors.
	Candidates []CandidateError
}

// CandidateError is one measured candidate of a tensor.
type CandidateError struct {
	Type formats.DType
	// Bytes is the tensor's data size in this type.
	Bytes int64
	// SSE is the (importance-weighted) squared error; Err is what the
	// metric counts.
	SSE, Err float64
}

// checkRecipeOptions refuses combinations that make no sense, and returns
// opts with the planning --type a budget uses.
func checkRecipeOptions(opts *Options) (*Options, error) {
	recipe := opts.TensorTypeFile != "" || opts.TypesFrom != ""
	if opts.TensorTypeFile != "" && opts.TypesFrom != "" {
		return nil, option.Errorf("%s and %s both give every type: use one", option.Name("TensorTypeFile"), option.Name("TypesFrom"))
	}
	if opts.Budget == nil {
		return opts, nil
	}
	b := opts.Budget
	switch {
	case b.Bytes > 0 && b.BPW > 0:
		return nil, option.Errorf("%s and %s both set the size: use one", option.Name("Budget.Bytes"), option.Name("Budget.BPW"))
	case b.Bytes <= 0 && !(b.BPW > 0):
		return nil, option.Errorf("a budget needs %s SIZE or %s N (more than 0)", option.Name("Budget.Bytes"), option.Name("Budget.BPW"))
	case b.BPW > 32 || math.IsNaN(b.BPW):
		return nil, option.Errorf("%s %g: want bits per weight between 0 and 32", option.Name("Budget.BPW"), b.BPW)
	case opts.Type != "":
		return nil, option.Errorf("%s %s with %s: the budget chooses every eligible tensor's type; leave out %s (or pin tensors with %s)", option.Name("Type"), opts.Type, option.Name("Budget.Bytes"), option.Name("Type"), option.Name("TensorTypes"))
	case recipe:
		return nil, option.Errorf("%s chooses the types itself: it does not combine with %s or %s (pin tensors with %s)", option.Name("Budget.Bytes"), option.Name("TensorTypeFile"), option.Name("TypesFrom"), option.Name("TensorTypes"))
	case opts.Pure:
		return nil, option.Errorf("%s does not apply to %s: a budget gives each tensor its own type", option.Name("Pure"), option.Name("Budget.Bytes"))
	}
	switch b.Metric {
	case "", MetricRelative, MetricAbsolute:
	default:
		return nil, option.Errorf("%s %q: want %s or %s", option.Name("Budget.Metric"), b.Metric, MetricRelative, MetricAbsolute)
	}
	for _, t := range b.Candidates {
		if _, err := quant.Encoder(t); err != nil || !t.IsGGML() {
			return nil, option.Errorf("%s: %s cannot be written to GGUF by this build", option.Name("Budget.Candidates"), t)
		}
	}
	o := *opts
	o.Type = budgetMixBase
	return &o, nil
}

// planGGUFRecipe plans a GGUF output with the recipe options applied:
// --tensor-type-file or --types-from under the user's --tensor-type
// rules, or a budget's allocation.
func (b *builder) planGGUFRecipe(f mix.FType, override mix.Override, userMeta [][2]string) error {
	recipe, err := b.recipeOverride()
	if err != nil {
		return err
	}
	if recipe != nil {
		user := override
		override = func(name string) (formats.DType, bool) {
			if user != nil {
				if t, ok := user(name); ok {
					return t, true
				}
			}
			return recipe(name)
		}
	}
	if b.opts.Budget == nil {
		return b.planGGUF(f, override)
	}
	return b.planBudget(f, override, userMeta)
}

// budgetTensor is an eligible tensor the allocator may give any candidate.
type budgetTensor struct {
	index  int // in b.dm.Sources
	name   string
	shape  []int64
	pinned bool
}

// planBudget measures, allocates and plans.
func (b *builder) planBudget(f mix.FType, user mix.Override, userMeta [][2]string) error {
	bo := b.opts.Budget
	inputs, elig, err := b.eligible(f, user)
	if err != nil {
		return err
	}
	cands := bo.Candidates
	if len(cands) == 0 {
		cands = DefaultCandidates
	}
	metric := bo.Metric
	if metric == "" {
		metric = MetricRelative
	}
	tasks, err := b.measureTasks(elig, cands)
	if err != nil {
		return err
	}
	sp, err := b.budgetSpace(f, user, userMeta, elig, tasks)
	if err != nil {
		return err
	}
	start := time.Now()
	b.log.Info("measuring candidate types", "tensors", len(elig), "candidates", len(cands), "file", b.opts.Input)
	meas, err := b.measure(tasks, bo.Threads)
	if err != nil {
		return err
	}
	rep := &BudgetReport{Limit: bo.Bytes, BPW: bo.BPW, Metric: metric, Elapsed: time.Since(start)}
	for _, m := range meas {
		rep.Measured += m.elements
		for k := range m.cands {
			c := &m.cands[k]
			c.Err = c.SSE
			if metric == MetricRelative && m.energy > 0 {
				c.Err = c.SSE / m.energy
			}
		}
	}
	b.log.Info("measured", "elements", rep.Measured, "time", rep.Elapsed.Round(time.Millisecond))
	chosen, chosenErr, err := b.allocateTypes(sp, elig, tasks, meas, rep)
	if err != nil {
		return err
	}
	rep.Mixes = b.priceMixes(inputs, elig, meas, sp.fileFixed)
	fillBudgetTensors(rep, elig, meas, chosen, user)
	if err := b.planGGUF(f, withTypes(user, chosen)); err != nil {
		return err
	}
	for i := range b.plan.Outputs {
		o := &b.plan.Outputs[i]
		if _, ok := chosen[o.Name]; ok {
			o.Note = fmt.Sprintf("budget (predicted relative error %.3g)", chosenErr[o.Name]) + strings.TrimPrefix(o.Note, "user rule")
		}
	}
	b.res.Budget = rep
	b.labelBudget(rep, cands)
	return nil
}

// eligible returns the mix inputs of every tensor and the tensors the
// budget allocates: those the mix quantizes that are floats (or ComfyUI
// modules), pinned when a user rule gives their type.
func (b *builder) eligible(f mix.FType, user mix.Override) ([]mix.Input, []budgetTensor, error) {
	srcs := b.dm.Sources
	inputs := make([]mix.Input, len(srcs))
	for i, s := range srcs {
		typ := s.Tensor.Type
		if s.Module != nil {
			typ = formats.F32
		}
		shape, _ := fold(s.Shape())
		inputs[i] = mix.Input{Name: s.Name, Shape: shape, Source: typ}
	}
	choices, err := mix.Choose(f, inputs, mix.Options{Arch: b.arch, Layout: b.layout, Pure: true, ReshapeConv: b.opts.ReshapeConv, Override: user})
	if err != nil {
		return nil, nil, err
	}
	var elig []budgetTensor
	for i, c := range choices {
		if !c.Quantized || !srcs[i].Float() && srcs[i].Module == nil {
			continue
		}
		pinned := false
		if user != nil {
			_, pinned = user(srcs[i].Name)
		}
		elig = append(elig, budgetTensor{index: i, name: srcs[i].Name, shape: c.Shape, pinned: pinned})
	}
	return inputs, elig, nil
}

// budgetSpace is what a budget leaves the allocated tensors.
type budgetSpace struct {
	fileFixed, dataFixed int64 // the file and data bytes of everything else
	least                int64 // the smallest the allocated tensors can take
	avail                int64 // the bytes the budget leaves them
	params               int64
}

// cost is the bytes tensor t takes in type typ, counted as the budget
// counts: aligned in the file for a size, data alone for bits per weight.
func (b *builder) cost(t *measureTask, typ formats.DType) int64 {
	if b.opts.Budget.Bytes > 0 {
		return align32(t.bytes(typ))
	}
	return t.bytes(typ)
}

// budgetSpace sizes the budget without measuring: the bytes every other
// tensor (and the header) takes, from a plan with each allocated tensor at
// its first candidate; a budget below the smallest file is refused before
// the input is read.
func (b *builder) budgetSpace(f mix.FType, user mix.Override, userMeta [][2]string, elig []budgetTensor, tasks []measureTask) (budgetSpace, error) {
	bo := b.opts.Budget
	first := map[string]formats.DType{}
	for i, e := range elig {
		if !e.pinned {
			first[e.name] = tasks[i].types[0]
		}
	}
	probe, err := b.probePlan(f, withTypes(user, first), userMeta)
	if err != nil {
		return budgetSpace{}, err
	}
	sp := budgetSpace{fileFixed: probe.file, dataFixed: probe.data, params: probe.params}
	for i, e := range elig {
		if e.pinned {
			continue
		}
		t := &tasks[i]
		sp.fileFixed -= align32(t.bytes(t.types[0]))
		sp.dataFixed -= t.bytes(t.types[0])
		m := b.cost(t, t.types[0])
		for _, typ := range t.types {
			m = min(m, b.cost(t, typ))
		}
		sp.least += m
	}
	if bo.Bytes > 0 {
		sp.avail = bo.Bytes - sp.fileFixed
	} else {
		sp.avail = int64(math.Floor(bo.BPW*float64(probe.params)/8)) - sp.dataFixed
	}
	if sp.least > sp.avail {
		return sp, b.budgetTooSmall(sp.fileFixed, sp.dataFixed, sp.least, sp.params)
	}
	return sp, nil
}

// allocateTypes chooses each unpinned tensor's type within the space and
// returns the choices and each one's predicted ‖a−b‖/‖a‖.
func (b *builder) allocateTypes(sp budgetSpace, elig []budgetTensor, tasks []measureTask, meas []measured, rep *BudgetReport) (map[string]formats.DType, map[string]float64, error) {
	items := make([]allocItem, 0, len(elig))
	var alloc []int // elig index of each item
	for i, e := range elig {
		if e.pinned {
			continue
		}
		var it allocItem
		for _, c := range meas[i].cands {
			it.Cost = append(it.Cost, b.cost(&tasks[i], c.Type))
			it.Err = append(it.Err, c.Err)
		}
		items = append(items, it)
		alloc = append(alloc, i)
	}
	a, err := allocate(items, sp.avail)
	if err != nil {
		return nil, nil, b.budgetTooSmall(sp.fileFixed, sp.dataFixed, sp.least, sp.params)
	}
	rep.Optimal = a.Breakpoint
	chosen := map[string]formats.DType{}
	chosenErr := map[string]float64{}
	for k, i := range alloc {
		c := meas[i].cands[a.Choice[k]]
		chosen[elig[i].name] = c.Type
		if meas[i].energy > 0 {
			chosenErr[elig[i].name] = math.Sqrt(c.SSE / meas[i].energy)
		}
	}
	return chosen, chosenErr, nil
}

// fillBudgetTensors lists every eligible tensor in the report with its
// type, bytes and error, and sums the allocated ones' errors.
func fillBudgetTensors(rep *BudgetReport, elig []budgetTensor, meas []measured, chosen map[string]formats.DType, user mix.Override) {
	var sse, energy float64
	for i, e := range elig {
		bt := BudgetTensor{Name: e.name, Pinned: e.pinned, Candidates: meas[i].cands}
		if e.pinned {
			bt.Type, _ = user(e.name)
			for _, c := range meas[i].cands {
				if c.Type == bt.Type {
					bt.Bytes, bt.Err = c.Bytes, c.Err
				}
			}
		} else {
			bt.Type = chosen[e.name]
			for _, c := range meas[i].cands {
				if c.Type == bt.Type {
					bt.Bytes, bt.Err = c.Bytes, c.Err
					sse += c.SSE
				}
			}
			energy += meas[i].energy
			rep.Error += bt.Err
		}
		rep.Tensors = append(rep.Tensors, bt)
	}
	if energy > 0 {
		rep.RelError = math.Sqrt(sse / energy)
	}
}

// labelBudget gives the report the label general.file_type gets: the type
// holding most allocated bytes.
func (b *builder) labelBudget(rep *BudgetReport, cands []formats.DType) {
	byType := map[formats.DType]int64{}
	for _, t := range rep.Tensors {
		byType[t.Type] += t.Bytes
	}
	var top formats.DType
	for _, t := range cands {
		if byType[t] > byType[top] {
			top = t
		}
	}
	if top != 0 && top.Quantized() {
		if ft, err := mix.Parse(top.String()); err == nil {
			b.res.FType = ft
		}
	}
	b.res.Type = "budget"
}

// withTypes returns an override giving the named tensors their types,
// under the user's own rules.
func withTypes(user mix.Override, types map[string]formats.DType) mix.Override {
	return func(name string) (formats.DType, bool) {
		if user != nil {
			if t, ok := user(name); ok {
				return t, true
			}
		}
		t, ok := types[name]
		return t, ok
	}
}

// align32 rounds a tensor's size up to GGUF's alignment.
func align32(n int64) int64 { return (n + 31) &^ 31 }

// probeSize is what a plan would write: the whole file, the tensor data
// without padding, and the parameters (elements with a source).
type probeSize struct{ file, data, params int64 }

// budgetTooSmall is the error for a budget below the smallest output the
// candidates allow: least bytes for the allocated tensors on top of the
// fixed ones.
func (b *builder) budgetTooSmall(fileFixed, dataFixed, least, params int64) error {
	bo := b.opts.Budget
	if bo.Bytes > 0 {
		return option.Errorf("%s: %s %s is below the smallest file the candidates allow, %s (%s of it in tensors kept in high precision, pinned tensors and the header)",
			b.opts.Input, option.Name("Budget.Bytes"), pipeline.HumanBytes(bo.Bytes), pipeline.HumanBytes(fileFixed+least), pipeline.HumanBytes(fileFixed))
	}
	return option.Errorf("%s: %s %g is below the smallest the candidates allow, %.3f bits per weight", b.opts.Input, option.Name("Budget.BPW"), bo.BPW, float64(dataFixed+least)*8/float64(params))
}

// probePlan plans with the given types on a copy of the builder, adds the
// metadata, and measures the file that plan would write.
func (b *builder) probePlan(f mix.FType, override mix.Override, userMeta [][2]string) (probeSize, error) {
	res := *b.res
	res.Warnings, res.ImatrixMissing, res.ImatrixUnused = nil, nil, nil
	res.modules = map[string]int{}
	tb := *b
	tb.res = &res
	tb.plan = &pipeline.Plan{Path: b.plan.Path, Format: b.plan.Format}
	tb.log = slog.New(slog.DiscardHandler)
	tb.origShape = nil
	if err := tb.planGGUF(f, override); err != nil {
		return probeSize{}, err
	}
	tb.metadata(userMeta)
	size, err := planFileSize(tb.plan)
	if err != nil {
		return probeSize{}, err
	}
	s, err := tb.plan.Summary()
	if err != nil {
		return probeSize{}, err
	}
	_, data, params, _ := s.Totals()
	return probeSize{file: size, data: data, params: params}, nil
}

// planFileSize returns the exact size of the file plan writes, header and
// padding included, from the format's own writer (nothing is written).
func planFileSize(plan *pipeline.Plan) (int64, error) {
	tensors, err := plan.Tensors()
	if err != nil {
		return 0, err
	}
	h := plan.Header
	if h.Name == "" {
		h.Name = plan.Path
	}
	w, err := plan.Format.New(io.Discard, tensors, h)
	if err != nil {
		return 0, err
	}
	sized, ok := w.(interface{ Size() int64 })
	if !ok {
		return 0, fmt.Errorf("%s: the %s writer cannot say its size", plan.Path, plan.Format.Name)
	}
	return sized.Size(), nil
}

// budgetNotes are the summary lines of a budget.
func budgetNotes(r *BudgetReport) []string {
	if r == nil {
		return nil
	}
	limit := fmt.Sprintf("%s (%d bytes)", pipeline.HumanBytes(r.Limit), r.Limit)
	if r.Limit == 0 {
		limit = fmt.Sprintf("%g bits per weight", r.BPW)
	}
	pinned := 0
	for _, t := range r.Tensors {
		if t.Pinned {
			pinned++
		}
	}
	objective := "the sum of their squared relative errors"
	if r.Metric == MetricAbsolute {
		objective = "the sum of their squared errors"
	}
	out := []string{
		fmt.Sprintf("budget: %s; predicted file %s (%d bytes); relative error %.6f over the %s (‖a−b‖/‖a‖ as sdtool diff measures it); the choice minimised %s, %.4g",
			limit, pipeline.HumanBytes(r.FileBytes), r.FileBytes, r.RelError, pipeline.Count(len(r.Tensors)-pinned, "allocated tensor", "allocated tensors"), objective, r.Error),
	}
	if pinned > 0 {
		out = append(out, fmt.Sprintf("budget: %s pinned by --tensor-type rules", pipeline.Count(pinned, "tensor", "tensors")))
	}
	if r.Optimal {
		out = append(out, "budget: no choice of at most these bytes has less predicted error")
	}
	for _, m := range r.Mixes {
		out = append(out, fmt.Sprintf("budget: %-6s for comparison: file %s (%d bytes), relative error %.6f", m.Name, pipeline.HumanBytes(m.FileBytes), m.FileBytes, m.RelError))
	}
	return out
}

// finishBudget computes the planned file's exact size and checks it
// against the budget (a failure here is a bug in the accounting).
func (b *builder) finishBudget() error {
	r := b.res.Budget
	if r == nil {
		return nil
	}
	size, err := planFileSize(b.plan)
	if err != nil {
		return err
	}
	s, err := b.plan.Summary()
	if err != nil {
		return err
	}
	_, data, params, bpw := s.Totals()
	r.FileBytes, r.DataBytes = size, data
	if r.Limit > 0 && size > r.Limit {
		return fmt.Errorf("%s: internal error: the budgeted plan needs %d bytes, over the budget of %d", b.opts.Output, size, r.Limit)
	}
	if r.BPW > 0 && float64(data)*8 > r.BPW*float64(params) {
		return fmt.Errorf("%s: internal error: the budgeted plan has %.4f bits per weight, over %g", b.opts.Output, bpw, r.BPW)
	}
	return nil
}

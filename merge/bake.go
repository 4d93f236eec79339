package merge

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/lora"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// Adapter is one adapter of a bake: its file and strength (the multiplier
// of "<lora:NAME:STRENGTH>").
type Adapter struct {
	Path     string
	Strength float64
}

// ParseAdapter reads "FILE[:STRENGTH]" (strength 1 when absent). The
// strength is what follows the last colon when that parses as a finite
// number, so a path with colons of its own needs one.
func ParseAdapter(s string) (Adapter, error) {
	a := Adapter{Path: s, Strength: 1}
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if v, err := strconv.ParseFloat(s[i+1:], 64); err == nil {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return Adapter{}, option.Errorf("%s %q: strength %q is not a finite number", option.Name("Adapters"), s, s[i+1:])
			}
			a.Path, a.Strength = s[:i], v
		}
	}
	if a.Path == "" {
		return Adapter{}, option.Errorf("%s %q: no file", option.Name("Adapters"), s)
	}
	return a, nil
}

// BakeOptions describe `sdtool merge --base MODEL --lora FILE[:STRENGTH]...`.
type BakeOptions struct {
	// Base is the model the adapters are applied to (any format sdtool
	// reads; ggml-quantized and ComfyUI quantized tensors are dequantized).
	Base string
	// Adapters are applied in order, each at its strength.
	Adapters []Adapter
	// AllowUnmatched bakes what matches when some adapter keys change no
	// base tensor; without it they are an error that lists them.
	AllowUnmatched bool
	// Log receives warnings; nil discards them.
	Log *slog.Logger
}

// Bake is a base model with adapters matched to it: Model reads as the
// base with every delta added (a *lora.Baked), so a plan that reads it
// writes the baked model. Close it after the plan has run.
type Bake struct {
	// Model is the baked model.
	Model *lora.Baked
	// Plan is the match: the changed tensors and what changes nothing.
	Plan *lora.Plan
	// Version is the family the base was matched as.
	Version names.Version
	// Inputs are every file read (the base's and the adapters'), which an
	// output must never replace.
	Inputs []string
	// Warnings are the problems that did not stop the bake.
	Warnings []string

	opts     BakeOptions
	base     formats.Model
	adapters []*lora.Adapter
}

// OpenBake opens the base and the adapters and matches them. Adapter keys
// that change nothing are an error unless AllowUnmatched; a layer whose
// delta does not fit the tensor its name matches is always one (naming
// the adapter keys, the base tensor and both shapes).
func OpenBake(o *BakeOptions) (_ *Bake, err error) {
	if o.Base == "" {
		return nil, option.Errorf("no %s model", option.Name("Base"))
	}
	if len(o.Adapters) == 0 {
		return nil, option.Errorf("no %s adapter", option.Name("Adapters"))
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Bake{opts: *o}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	m, err := formats.Open(o.Base)
	if err != nil {
		return nil, err
	}
	b.base = m
	b.Inputs = append(b.Inputs, inputFiles(m)...)
	for _, w := range m.Info().Warnings {
		b.warn(log, w)
	}
	dm, n, err := tensor.Dequantized(m)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		b.warn(log, fmt.Sprintf("%s: %d ComfyUI quantized layers are dequantized exactly before the adapters are added", o.Base, n))
	}
	view, err := tensor.NewView(dm)
	if err != nil {
		return nil, err
	}
	// Match on logical shapes (a GGUF's comfy.gguf.orig_shape), which keep
	// the element order the deltas are added in.
	logical := make([]formats.Tensor, len(view.Sources))
	quantized := 0
	for i, s := range view.Sources {
		logical[i] = s.Tensor
		logical[i].Shape = s.Shape()
		if s.Tensor.Type.Quantized() {
			quantized++
		}
	}
	v, prefix := lora.DetectBase(logical)
	if v == names.Unknown {
		b.warn(log, fmt.Sprintf("%s: the model family was not recognised: adapter names are matched to the tensor names as they are", o.Base))
	}
	b.Version = v
	base, err := lora.NewBase(logical, v, prefix)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Base, err)
	}
	uses := make([]lora.Use, len(o.Adapters))
	for i, ad := range o.Adapters {
		a, err := lora.Open(ad.Path)
		if err != nil {
			return nil, err
		}
		b.adapters = append(b.adapters, a)
		b.Inputs = append(b.Inputs, inputFiles(a.Model())...)
		if !lora.IsAdapter(a.Model().Tensors()) {
			return nil, fmt.Errorf("%s: not an adapter: most of its %d tensors have no adapter suffix (lora_up, lora_A, hada_w1_a, ...)", ad.Path, len(a.Model().Tensors()))
		}
		uses[i] = lora.Use{Adapter: a, Strength: ad.Strength}
	}
	plan, err := base.Match(uses...)
	if err != nil {
		return nil, err
	}
	b.Plan = plan
	if len(plan.Unmatched) > 0 {
		var keys []string
		for _, u := range plan.Unmatched {
			keys = append(keys, describeUnmatched(u))
		}
		msg := fmt.Sprintf("%d adapter modules or tensors change no tensor of %s: %s", len(keys), o.Base, listSome(keys))
		if !o.AllowUnmatched {
			return nil, option.Errorf("%s (%s bakes the rest)", msg, option.Name("AllowUnmatched"))
		}
		b.warn(log, msg)
	}
	if len(plan.Targets) == 0 {
		return nil, fmt.Errorf("the adapters change no tensor of %s", o.Base)
	}
	if quantized > 0 {
		b.warn(log, fmt.Sprintf("%s: %d tensors are ggml-quantized: they are dequantized, and the changed ones quantized again (quality suffers compared with baking into the float weights)", o.Base, quantized))
	}
	if b.Model, err = lora.Bake(dm, plan); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Bake) warn(log *slog.Logger, w string) {
	log.Warn(w)
	b.Warnings = append(b.Warnings, w)
}

// inputFiles lists the files of an opened model.
func inputFiles(m formats.Model) []string {
	files := m.Info().Files
	if len(files) == 0 {
		files = []string{m.Path()}
	}
	if m.Path() != files[0] {
		files = append(files, m.Path())
	}
	return files
}

func describeUnmatched(u lora.Unmatched) string {
	what := u.Module
	if what == "" {
		what = strings.Join(u.Keys, ", ")
		if len(u.Keys) > 3 {
			what = strings.Join(u.Keys[:3], ", ") + fmt.Sprintf(", ... (%d tensors)", len(u.Keys))
		}
	}
	return fmt.Sprintf("%s: %s (%s)", u.Adapter, what, u.Reason)
}

// Close closes the base and the adapters.
func (b *Bake) Close() error {
	var errs []error
	if b.base != nil {
		errs = append(errs, b.base.Close())
		b.base = nil
	}
	for _, a := range b.adapters {
		errs = append(errs, a.Close())
	}
	b.adapters = nil
	return errors.Join(errs...)
}

// Description is the one-line account of the bake that the output's
// sdtool.merge metadata holds: the base and each adapter with its strength.
func (b *Bake) Description() string {
	parts := []string{"method=lora", "base=" + filepath.Base(b.opts.Base)}
	for _, a := range b.opts.Adapters {
		parts = append(parts, fmt.Sprintf("lora=%s:%g", filepath.Base(a.Path), a.Strength))
	}
	return strings.Join(parts, " ")
}

// changeNote says how a target changes, for the plan's table.
func changeNote(tg *lora.Target, p *lora.Plan) string {
	var parts []string
	for _, c := range tg.Changes {
		l := c.Layer
		s := fmt.Sprintf("%s %s", filepath.Base(p.Uses[c.Use].Adapter.Path), l.Kind.String())
		if l.Rank > 0 {
			s += fmt.Sprintf(" r%d", l.Rank)
		}
		if l.DoRA {
			s += " dora"
		}
		if c.Rows != tg.Rows {
			s += fmt.Sprintf(" rows %d-%d", c.TargetRow, c.TargetRow+c.Rows-1)
		}
		parts = append(parts, s)
	}
	return "+ " + strings.Join(parts, " + ")
}

// Annotate marks the outputs of a plan that reads the baked model (made
// by this package or by another command's planner) with the adapters that
// change them, and adds the adapters to the plan's inputs.
func (b *Bake) Annotate(p *pipeline.Plan) {
	for i := range p.Outputs {
		o := &p.Outputs[i]
		if tg := b.Plan.Target(o.Name); tg != nil {
			note := changeNote(tg, b.Plan)
			if o.Note != "" {
				note += "; " + o.Note
			}
			o.Note = note
		}
	}
	have := map[string]bool{}
	for _, f := range p.Inputs {
		have[f] = true
	}
	for _, f := range b.Inputs {
		if !have[f] {
			p.Inputs = append(p.Inputs, f)
			have[f] = true
		}
	}
}

// PlanOutput plans writing the baked model to out (.safetensors or .gguf
// by extension). typ "" keeps every tensor's type (a changed ggml-quantized
// tensor is quantized again to its type); f32, f16 or bf16 gives every
// float tensor that type. Other types and mixes are quantize's: the
// command plans them with quantize's planner over Model.
func (b *Bake) PlanOutput(out, typ string) (_ *pipeline.Plan, err error) {
	p, err := newPlan(out)
	if err != nil {
		return nil, err
	}
	want, set, err := ParseFloatDType(typ)
	if err != nil {
		return nil, option.Errorf("%s %q: this plan writes f32, f16 or bf16 (or keeps the base's types)", option.Name("Type"), typ)
	}
	view, err := tensor.NewView(b.Model)
	if err != nil {
		return nil, err
	}
	var errs errList
	var unstorable []string
	for _, s := range view.Sources {
		outT, shape := s.Tensor.Type, s.Tensor.Shape
		if set && s.Float() {
			outT = want
		}
		if !p.Format.Stores(outT) {
			unstorable = append(unstorable, fmt.Sprintf("%q (%s)", s.Name, outT))
			continue
		}
		var prod pipeline.Producer
		how := "copied"
		if outT == s.Tensor.Type {
			// Stored rows as they are; a changed tensor's bytes are its baked values.
			prod = pipeline.Copy(b.Model, s.Tensor)
			if b.Model.Computes(&s.Tensor) {
				if _, err := quant.Encoder(outT); err != nil {
					errs.add(option.Errorf("%s: tensor %q: the baked values cannot be encoded as %s (%v); give %s", b.opts.Base, s.Name, outT, err, option.Name("Type")))
					continue
				}
				how = ""
			}
		} else {
			enc, err := quant.Encoder(outT)
			if err != nil {
				errs.add(fmt.Errorf("tensor %q: %w", s.Name, err))
				continue
			}
			shape = s.Shape()
			prod = pipeline.Convert(s, outT, pipeline.EncodeRows(outT, enc.Quantize, nil))
			how = "converted"
		}
		add(p, s.Name, outT, shape, how, prod, s)
	}
	if len(unstorable) > 0 {
		errs.add(option.Errorf("%s: %d tensors have types %s cannot store: %s; give %s f16 or a .gguf output", b.opts.Base, len(unstorable), p.Format.Name, listSome(unstorable), option.Name("Type")))
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	p.Header.Metadata = b.metadata(p.Format, set)
	if p.Format.Name == "gguf" {
		p.Header.PadEnd = true
	}
	b.Annotate(p)
	pipeline.FoldHighDims(p)
	if err := p.Check(); err != nil {
		return nil, err
	}
	return p, nil
}

// metadata keeps the base's metadata when the output has its format
// (strings only for safetensors; without general.file_type when the types
// change) and adds sdtool.merge.
func (b *Bake) metadata(format formats.Creator, typeChanged bool) formats.Metadata {
	var meta formats.Metadata
	if b.Model.Info().Format == format.Name {
		for _, kv := range b.Model.Metadata() {
			if kv.Key == "sdtool.merge" || kv.Key == "general.file_type" && typeChanged || kv.Key == "general.alignment" {
				continue
			}
			if _, ok := kv.Value.(string); ok || format.Name == "gguf" {
				meta = append(meta, kv)
			}
		}
	}
	return append(meta, formats.KV{Key: "sdtool.merge", Type: formats.TypeString, Value: b.Description()})
}

// WriteChanges lists, per adapter, the base tensors it changes and how,
// then what changes nothing: the --dry-run account of the match.
func (b *Bake) WriteChanges(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for ui, u := range b.Plan.Uses {
		var lines []string
		layers := map[*lora.Layer]bool{}
		for _, tg := range b.Plan.Targets {
			for _, c := range tg.Changes {
				if c.Use != ui {
					continue
				}
				layers[c.Layer] = true
				l := c.Layer
				kind := l.Kind.String()
				if l.Rank > 0 {
					kind += fmt.Sprintf(" r%d", l.Rank)
				}
				if l.DoRA {
					kind += " dora"
				}
				rows := ""
				if c.Rows != tg.Rows {
					rows = fmt.Sprintf(" rows %d-%d", c.TargetRow, c.TargetRow+c.Rows-1)
				}
				lines = append(lines, fmt.Sprintf("  %s%s\t%s\tscale %.4g\t%s", tg.Name, rows, kind, l.Scale, l.Module))
			}
		}
		fmt.Fprintf(tw, "%s (strength %g): %d layers change %d tensors\n", u.Adapter.Path, u.Strength, len(layers), len(lines))
		for _, l := range lines {
			fmt.Fprintln(tw, l)
		}
	}
	if n := len(b.Plan.Unmatched); n > 0 {
		fmt.Fprintf(tw, "%d adapter modules or tensors change nothing (--allow-unmatched):\n", n)
		for _, u := range b.Plan.Unmatched {
			fmt.Fprintf(tw, "  %s\n", describeUnmatched(u))
		}
	}
	return tw.Flush()
}

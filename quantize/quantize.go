package quantize

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"

	// PyTorch .ckpt/.pt inputs (restricted unpickler).
	_ "github.com/sdtool/sdtool/formats/ckpt"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/text"

	// The safetensors reader and writer (formats.Open, formats.CreatorFor).
	"github.com/sdtool/sdtool/convrot"
	_ "github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/quant/mix"
	"github.com/sdtool/sdtool/tensor"
)

// Options is one `sdtool quantize` invocation.
type Options struct {
	// Input is the model to read (GGUF, split GGUF, safetensors, sharded index or shard).
	Input string
	// Output is the file to write: .gguf for ggml types and mixes,
	// .safetensors for int8_convrot, int8, fp8_e4m3 and fp8_e5m2.
	Output string
	// Type is a TypeTable value.
	Type string
	// Pure gives every eligible tensor the base type, with no mix upgrades.
	Pure bool
	// TensorTypes are --tensor-type REGEX=TYPE rules: the last matching one wins.
	TensorTypes []string
	// TensorTypeRules is --tensor-type-rules, sd.cpp's "REGEX=TYPE,..." where the first match wins.
	TensorTypeRules string
	// Imatrix lists importance matrix files (.dat or GGUF).
	Imatrix []string
	// AllowRequantize accepts inputs with ggml-quantized tensors (dequantized first).
	AllowRequantize bool
	// ReshapeConv reshapes sd1/sdxl tensors into rows of 256 as ComfyUI-GGUF does.
	ReshapeConv bool
	// Targets are the consumers to check (sdcpp, comfyui, ggml); empty means all.
	Targets []string
	// Strict refuses an output that one of the targets cannot load.
	Strict bool
	// GroupSize is the convrot rotation group size (0: 256).
	GroupSize int
	// Metadata are KEY=VALUE strings written into the output's metadata.
	Metadata []string
	// MetadataPreset is "" or "default" (automatic keys) or "none".
	MetadataPreset string
	// TextEncoderNames is how a standalone T5 or Qwen text encoder's GGUF
	// names its tensors: "llama.cpp" (the default; ComfyUI-GGUF's text
	// loader needs them, sd.cpp converts them) or "sdcpp" (the input's).
	TextEncoderNames string
	// Tokenizer is a byte-level BPE tokenizer.json (or a folder holding
	// one) whose vocabulary a GGUF output carries under tokenizer.ggml.*
	// (ComfyUI-GGUF rebuilds Mistral's Tekken tokenizer from it).
	Tokenizer string
	// Budget, when set, chooses every eligible tensor's type to fit a
	// size with the least measured error (budget.go); --type stays empty.
	Budget *Budget
	// TensorTypeFile is a llama.cpp --tensor-type-file (NAME=TYPE items)
	// giving eligible tensors their types, under the --tensor-type rules.
	TensorTypeFile string
	// TypesFrom is a GGUF whose per-tensor types are copied (same names).
	TypesFrom string
	// Split, when active, writes the output as shards (pipeline.Plan.Split:
	// a split GGUF, or safetensors shards with an index); the consumers
	// that read one file are then reported unable to load it.
	Split gguf.SplitLimits
	// Log receives warnings and per-tensor records; nil discards them.
	Log *slog.Logger
}

// Report is what planning found beside the plan itself: the mix, the
// detected architecture, which consumers can load the output, the imatrix
// coverage and the warnings.
type Report struct {
	// Type is the --type as given; Format is "gguf" or "safetensors".
	Type, Format string
	// FType is the mix (GGUF outputs).
	FType mix.FType
	// Arch is the detected architecture, ComfyArch the general.architecture
	// written: its ComfyUI-GGUF name, or llama.cpp's for a text encoder
	// ComfyUI-GGUF has none for ("" for none).
	Arch, ComfyArch string
	// LlamaNames reports a text encoder written with llama.cpp's tensor names.
	LlamaNames bool
	// Tokenizer describes the --tokenizer vocabulary written ("" for none).
	Tokenizer string
	// Consumers says which targets can load the output.
	Consumers []Consumer
	// ImatrixMissing lists tensors that could use importance weights but have no entry;
	// ImatrixUnused lists entries that matched no quantized tensor.
	ImatrixMissing, ImatrixUnused []string
	// Warnings are the problems that did not stop the plan.
	Warnings []string
	// Dequantized counts the input's ggml-quantized tensors decoded to a
	// float --type (no --allow-requantize needed: nothing is quantized again).
	Dequantized int

	// Budget is what a --budget or --bpw allocation chose (nil without one).
	Budget *BudgetReport

	reshaped    int            // outputs stored with another shape
	rowsOf256   int            // of those, --reshape-conv's rows (a 5-D fold is sd.cpp's own layout)
	modules     map[string]int // ComfyUI modules written, by type name
	inputScales int            // modules given a calibrated input_scale
}

// ErrRequantize is wrapped by the error for quantized inputs without AllowRequantize.
var ErrRequantize = errors.New("input is already quantized")

// Plan opens the input and plans the quantization; every problem in the
// arguments is found here, before anything is written. The plan keeps the
// input open until its Close.
func Plan(opts *Options) (*pipeline.Plan, *Report, error) {
	return planWith(opts, func() (formats.Model, error) { return formats.Open(opts.Input) })
}

// PlanModel is Plan for a model that is already open (opts.Input only
// names it in messages, and is m.Path() when empty); the caller keeps m
// open while the plan runs and closes it.
func PlanModel(opts *Options, m formats.Model) (*pipeline.Plan, *Report, error) {
	o := *opts
	if o.Input == "" {
		o.Input = m.Path()
	}
	return planWith(&o, func() (formats.Model, error) {
		if c, ok := m.(tensor.Computed); ok {
			// A model that computes tensors (a LoRA bake) must stay one, so
			// that its float32 values are quantized without a rounding first.
			return keepOpenComputed{c}, nil
		}
		return keepOpen{m}, nil
	})
}

// keepOpen is a model whose Close is left to its owner.
type keepOpen struct{ formats.Model }

// Close does nothing: PlanModel's caller closes the model.
func (keepOpen) Close() error { return nil }

// keepOpenComputed is keepOpen for a tensor.Computed model.
type keepOpenComputed struct{ tensor.Computed }

// Close does nothing: PlanModel's caller closes the model.
func (keepOpenComputed) Close() error { return nil }

// planWith checks the options, then opens the model and plans.
func planWith(opts *Options, open func() (formats.Model, error)) (*pipeline.Plan, *Report, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Input == "" {
		return nil, nil, errors.New("no input model")
	}
	if opts.Output == "" {
		return nil, nil, errors.New("no output: give -o OUT.gguf (or OUT.safetensors for the ComfyUI types)")
	}
	opts, err := checkRecipeOptions(opts)
	if err != nil {
		return nil, nil, err
	}
	res := &Report{Type: opts.Type, modules: map[string]int{}}
	st, err := settingsOf(opts, res)
	if err != nil {
		return nil, nil, err
	}
	m, err := open()
	if err != nil {
		return nil, nil, err
	}
	plan := &pipeline.Plan{Path: opts.Output, Format: st.format}
	plan.Use(m)
	if err := planModel(opts, st, m, plan, res, log); err != nil {
		plan.Close()
		return nil, nil, err
	}
	return plan, res, nil
}

// settings are the options of a quantization, checked and parsed before
// the model is opened.
type settings struct {
	format     formats.Creator
	ct         convrot.Type // the ComfyUI type, for a safetensors output
	ft         mix.FType    // the mix, for a GGUF output
	userMeta   [][2]string
	tokMeta    formats.Metadata
	targets    []string
	override   mix.Override
	comfyRules func(string) (comfyChoice, bool)
	imp        *Importance
}

// settingsOf checks and parses opts: the type and the output it writes,
// the metadata, tokenizer, targets, rules and importance matrices.
func settingsOf(opts *Options, res *Report) (st settings, err error) {
	if st.ct, st.ft, st.format, err = outputType(opts, res); err != nil {
		return st, err
	}
	switch opts.MetadataPreset {
	case "", "default", "none":
	default:
		return st, option.Errorf("%s %q: want default or none", option.Name("MetadataPreset"), opts.MetadataPreset)
	}
	if st.userMeta, err = parseMetadata(opts.Metadata); err != nil {
		return st, err
	}
	if opts.Tokenizer != "" {
		if res.Format != "gguf" {
			return st, option.Errorf("%s applies to GGUF outputs: its vocabulary is stored as GGUF arrays", option.Name("Tokenizer"))
		}
		v, err := text.LoadByteBPE(opts.Tokenizer)
		if err != nil {
			return st, option.Errorf("%s: %w", option.Name("Tokenizer"), err)
		}
		st.tokMeta = v.GGUFMetadata()
		res.Tokenizer = fmt.Sprintf("byte-level BPE tokenizer (%d tokens, %d merges) from %s under tokenizer.ggml.*", len(v.Tokens), len(v.Merges), opts.Tokenizer)
	}
	if st.targets, err = ParseTargets(opts.Targets); err != nil {
		return st, err
	}
	if res.Format == "safetensors" {
		if st.comfyRules, err = ruleSet(opts, parseComfyRuleType); err != nil {
			return st, err
		}
		if err := checkComfyOptions(opts, st.ct); err != nil {
			return st, err
		}
	} else if st.override, err = parseOverrides(opts); err != nil {
		return st, err
	}
	if len(opts.Imatrix) > 0 {
		if st.imp, err = LoadImportance(opts.Imatrix); err != nil {
			return st, option.Errorf("%s: %w", option.Name("Imatrix"), err)
		}
	}
	return st, nil
}

// outputType parses the type: a ComfyUI type writes safetensors, a mix
// or ggml type GGUF, and the output's extension must say the same.
func outputType(opts *Options, res *Report) (ct convrot.Type, ft mix.FType, format formats.Creator, err error) {
	if opts.Type == "" {
		return ct, ft, format, option.Errorf("no %s (see sdtool quantize --help for the table)", option.Name("Type"))
	}
	ct, convrotErr := convrot.ParseType(opts.Type)
	if convrotErr == nil && ct == convrot.NVFP4 && strings.EqualFold(filepath.Ext(opts.Output), ".gguf") {
		// nvfp4 is also a ggml type: the output's extension picks which.
		convrotErr = errors.New("ggml nvfp4")
	}
	if convrotErr == nil {
		res.Format = "safetensors"
	} else {
		if ft, err = mix.Parse(opts.Type); err != nil {
			if _, known := formats.ParseType(opts.Type); !known {
				// One wording, with the nearest of every --type value.
				err = fmt.Errorf("%w (see `sdtool quantize --help` for the table)", formats.UnknownType(opts.Type, append(mix.Names(), convrot.Names()...)))
			}
			return ct, ft, format, option.Errorf("%s: %w", option.Name("Type"), err)
		}
		res.Format, res.FType = "gguf", ft
	}
	if err := pipeline.FolderOutput(opts.Output, res.Format); err != nil {
		return ct, ft, format, err
	}
	format, err = formats.CreatorFor(opts.Output)
	if err != nil || format.Name != res.Format {
		return ct, ft, format, option.Errorf("%s: %s %s writes %s: the output must end in .%s, not %q", opts.Output, option.Name("Type"), opts.Type, res.Format, res.Format, filepath.Ext(opts.Output))
	}
	return ct, ft, format, nil
}

// checkComfyOptions refuses the options a ComfyUI type ct does not take.
func checkComfyOptions(opts *Options, ct convrot.Type) error {
	switch {
	case opts.TensorTypeFile != "" || opts.TypesFrom != "":
		return option.Errorf("%s and %s apply to GGUF outputs, not %s", option.Name("TensorTypeFile"), option.Name("TypesFrom"), ct)
	case opts.Pure:
		return option.Errorf("%s applies to GGUF types, not %s", option.Name("Pure"), ct)
	case len(opts.Imatrix) > 0 && !convrot.UsesImportance(ct) && !takesInputScale(ct):
		return option.Errorf("%s applies to GGUF types, nvfp4 and mxfp8 (importance weights) and fp8 (input_scale from activation maxima): %s uses neither", option.Name("Imatrix"), ct)
	case opts.ReshapeConv:
		return option.Errorf("%s applies to GGUF outputs only", option.Name("ReshapeConv"))
	}
	return nil
}

// planModel plans model m into plan: the builder for its family, the
// tensors and metadata, then the checks of the whole (rules that matched
// nothing, which consumers load it, shards).
func planModel(opts *Options, st settings, m formats.Model, plan *pipeline.Plan, res *Report, log *slog.Logger) error {
	for _, w := range m.Info().Warnings {
		log.Warn(w)
		res.Warnings = append(res.Warnings, w)
	}
	dm, err := tensor.NewView(m)
	if err != nil {
		return err
	}
	if err := checkRequantize(opts, dm, log, res); err != nil {
		return err
	}
	b, err := newBuilder(opts, st, m, dm, plan, res, log)
	if err != nil {
		return err
	}
	if res.Format == "safetensors" {
		err = b.planConvrot(st.ct, st.comfyRules)
	} else {
		err = b.planGGUFRecipe(st.ft, st.override, st.userMeta)
	}
	if err != nil {
		return err
	}
	b.metadata(st.userMeta)
	if err := b.finishBudget(); err != nil {
		return err
	}
	if err := plan.Check(); err != nil {
		return err
	}
	return checkPlanned(opts, st, dm, plan, res, log)
}

// newBuilder detects the model's family and sets up the builder: the
// names a text encoder is written with and the imatrix's key.
func newBuilder(opts *Options, st settings, m formats.Model, dm *tensor.View, plan *pipeline.Plan, res *Report, log *slog.Logger) (*builder, error) {
	arch := family.Detect(m.Tensors(), m.Metadata())
	res.Arch = arch.Name
	if f := arch.Main(); f != nil && f.Kind == family.KindDiffusion {
		// Text encoders keep sd.cpp's names, which ComfyUI-GGUF's text
		// loader does not map: no architecture that would promise it can.
		res.ComfyArch = f.ComfyArch
	}
	b := &builder{opts: opts, res: res, plan: plan, dm: dm, m: m, log: log, imp: st.imp, arch: arch.Name, layout: &arch, tokenizer: st.tokMeta}
	if f := arch.Main(); res.Format == "gguf" && f != nil && f.GGUFNames != nil && len(arch.Components) == 1 && arch.Components[0].Prefix == "" {
		switch opts.TextEncoderNames {
		case "", "llama.cpp":
			// ComfyUI-GGUF's text loader reads llama.cpp's names and
			// architecture; sd.cpp converts those names back itself.
			b.rename, res.ComfyArch, res.LlamaNames, b.llama = f.LlamaName, f.LlamaArch(), true, f
		case "sdcpp":
		default:
			return nil, option.Errorf("%s %q: want llama.cpp or sdcpp", option.Name("TextEncoderNames"), opts.TextEncoderNames)
		}
	}
	if st.imp != nil {
		// Entries written by sd.cpp are named as sd.cpp converts names.
		v := names.VersionOf(arch)
		b.imatrixKey = func(name string) string { return names.Convert(name, v) }
	}
	return b, nil
}

// checkPlanned warns about rules that matched nothing, says which
// consumers load the output (refusing with Strict when one cannot), marks
// a split output and adds the plan's notes.
func checkPlanned(opts *Options, st settings, dm *tensor.View, plan *pipeline.Plan, res *Report, log *slog.Logger) error {
	names := make([]string, len(dm.Sources))
	for i, s := range dm.Sources {
		names[i] = s.Name
	}
	unmatched := unmatchedRules(opts, names)
	for _, w := range unmatched {
		log.Warn(w)
		res.Warnings = append(res.Warnings, w)
	}
	res.Consumers = checkConsumers(res, plan, st.targets)
	plan.Split = opts.Split
	paths, _, err := plan.Shards()
	if err != nil {
		return err
	}
	if len(paths) > 1 {
		res.MarkSplit()
	}
	for _, c := range res.Consumers {
		if !c.OK {
			msg := fmt.Sprintf("%s cannot load %s: %s", c.Name, opts.Output, strings.Join(c.Problems, "; "))
			if opts.Strict {
				return option.Errorf("%s: %s", option.Name("Strict"), msg)
			}
			// The summary lists every consumer; warn only about the ones asked for.
			if len(opts.Targets) > 0 {
				log.Warn(msg)
			} else {
				log.Info(msg)
			}
		}
	}
	plan.Notes = append(append(notes(res), budgetNotes(res.Budget)...), unmatched...)
	return nil
}

// checkRequantize refuses ggml-quantized inputs unless allowed, and warns
// about what is dequantized.
func checkRequantize(opts *Options, dm *tensor.View, log *slog.Logger, res *Report) error {
	var q []string
	modules := 0
	for _, s := range dm.Sources {
		if s.Module != nil {
			modules++
		} else if s.Tensor.Type.Quantized() {
			q = append(q, s.Name)
		}
	}
	if len(q) > 0 && dequantizeOnly(opts, res) {
		// Back to a float type: every quantized tensor is decoded exactly,
		// nothing is quantized again, so there is no quality to lose.
		res.Dequantized = len(q)
		log.Info("dequantizing quantized tensors", "count", len(q), "file", opts.Input, "type", res.FType.Base)
	} else if len(q) > 0 {
		if !opts.AllowRequantize {
			return option.Errorf("%s: %s already quantized (tensor %q is %s): %w; requantizing loses quality, pass %s to dequantize and quantize again",
				opts.Input, pipeline.Count(len(q), "tensor is", "tensors are"), q[0], firstType(dm, q[0]), ErrRequantize, option.Name("AllowRequantize"))
		}
		w := fmt.Sprintf("requantizing %s of %s: dequantized first, and quality suffers compared with quantizing the original weights", pipeline.Count(len(q), "quantized tensor", "quantized tensors"), opts.Input)
		log.Warn(w)
		res.Warnings = append(res.Warnings, w)
	}
	if modules > 0 {
		w := fmt.Sprintf("%s of %s dequantized exactly (codes times scales, rotation undone) before quantizing", pipeline.Count(modules, "ComfyUI quantized layer", "ComfyUI quantized layers"), opts.Input)
		log.Warn(w)
		res.Warnings = append(res.Warnings, w)
	}
	return nil
}

// dequantizeOnly reports a GGUF output whose every tensor is a float type:
// a float --type (F16, BF16, F32) and no rules that could pick a block type.
func dequantizeOnly(opts *Options, res *Report) bool {
	return res.Format == "gguf" && !res.FType.Base.Quantized() && len(opts.TensorTypes) == 0 && opts.TensorTypeRules == ""
}

func firstType(dm *tensor.View, name string) string {
	s, _ := dm.Lookup(name)
	return s.TypeName()
}

// parseOverrides reads the user's type rules for a GGUF output.
func parseOverrides(opts *Options) (mix.Override, error) {
	f, err := ruleSet(opts, parseGGMLRuleType)
	if f == nil || err != nil {
		return nil, err
	}
	return mix.Override(f), nil
}

// parseMetadata reads --metadata KEY=VALUE items.
func parseMetadata(items []string) ([][2]string, error) { return pipeline.ParseMetadataItems(items) }

// reportDropped warns about input metadata the output cannot hold.
func (b *builder) reportDropped(dropped []pipeline.DroppedKey) {
	for _, d := range dropped {
		w := fmt.Sprintf("metadata %s of %s is not carried: %s", d.Key, b.opts.Input, d.Reason)
		b.log.Warn(w)
		b.res.Warnings = append(b.res.Warnings, w)
	}
}

// builder accumulates the plan.
type builder struct {
	opts *Options
	res  *Report
	plan *pipeline.Plan
	dm   *tensor.View
	m    formats.Model
	log  *slog.Logger
	imp  *Importance
	arch string
	// layout is the detected checkpoint: each tensor is planned with the
	// family of its component.
	layout *family.Architecture
	// rename, when set, gives an output tensor's name (llama.cpp's names
	// for a standalone text encoder).
	rename func(string) string
	// tokenizer is --tokenizer's vocabulary as GGUF metadata.
	tokenizer formats.Metadata
	// llama is the text encoder's family when it is written with
	// llama.cpp's names (its q/k permutation and norm shift apply).
	llama *family.Family
	// imatrixKey maps a tensor name to the name an imatrix may hold it
	// under when there is no exact entry (nil: exact names only).
	imatrixKey func(string) string
	// origShape records tensors stored with another shape, in output order.
	origShape []struct {
		name  string
		shape []int64
	}
}

// fold returns the shape a tensor with more than 4 dims is stored with:
// leading dims multiplied together down to 4, as sd.cpp folds 5-D
// kernels, so that ggml's reader accepts it; the torch shape goes into
// comfy.gguf.orig_shape.
func fold(shape []int64) ([]int64, bool) {
	if len(shape) <= 4 {
		return shape, false
	}
	lead := int64(1)
	for _, d := range shape[:len(shape)-3] {
		lead *= d
	}
	return append([]int64{lead}, shape[len(shape)-3:]...), true
}

// planGGUF plans a GGUF output with mix f.
func (b *builder) planGGUF(f mix.FType, override mix.Override) error {
	choices, folded, err := b.ggufChoices(f, override)
	if err != nil {
		return err
	}
	used := map[string]bool{} // imatrix entries used
	renamed := map[string]string{}
	for i, s := range b.dm.Sources {
		if err := b.planGGUFTensor(s, choices[i], folded[i], used, renamed); err != nil {
			return err
		}
	}
	if b.imp != nil {
		for _, name := range b.imp.Order {
			if !used[name] {
				b.res.ImatrixUnused = append(b.res.ImatrixUnused, name)
			}
		}
	}
	return nil
}

// ggufChoices lets the mix choose every tensor's type and shape (5-D
// kernels folded first, ComfyUI modules planned as F32 weights) and checks
// ReshapeConv against the family.
func (b *builder) ggufChoices(f mix.FType, override mix.Override) ([]mix.Choice, []bool, error) {
	srcs := b.dm.Sources
	inputs := make([]mix.Input, len(srcs))
	folded := make([]bool, len(srcs))
	for i, s := range srcs {
		typ := s.Tensor.Type
		if s.Module != nil {
			// Decoded exactly to floats: plan it as an F32 weight.
			typ = formats.F32
		}
		shape, fo := fold(s.Shape())
		folded[i] = fo
		inputs[i] = mix.Input{Name: s.Name, Shape: shape, Source: typ}
	}
	choices, err := mix.Choose(f, inputs, mix.Options{Arch: b.arch, Layout: b.layout, Pure: b.opts.Pure, ReshapeConv: b.opts.ReshapeConv, Override: override})
	if err != nil {
		return nil, nil, err
	}
	if f := b.layout.Main(); b.opts.ReshapeConv && (f == nil || !f.ReshapeConv) {
		return nil, nil, option.Errorf("%s applies to %s models; %s is %q", option.Name("ReshapeConv"), strings.Join(family.ReshapeConvIDs(), "/"), b.opts.Input, b.res.Arch)
	}
	if b.opts.ReshapeConv {
		b.warn("--reshape-conv: conv kernels are stored as rows of 256 with comfy.gguf.orig_shape (ComfyUI-GGUF's layout); stable-diffusion.cpp cannot load the result")
	}
	return choices, folded, nil
}

// warn logs w and keeps it for the report.
func (b *builder) warn(w string) {
	b.log.Warn(w)
	b.res.Warnings = append(b.res.Warnings, w)
}

// planGGUFTensor plans tensor s as the mix chose (c): left out when GGUF
// cannot hold it or llama.cpp's names collide, renamed, reshaped, copied
// or converted; used collects the imatrix entries it uses, renamed the
// names given so far.
func (b *builder) planGGUFTensor(s *tensor.Source, c mix.Choice, folded bool, used map[string]bool, renamed map[string]string) error {
	t := c.Type
	if s.Module != nil && !c.Quantized && !t.Info().Float {
		t = formats.F16
	}
	if positionIDs(s) {
		// sd.cpp drops these arange buffers by name, and its convert
		// stops on an I64 one in a GGUF; ComfyUI makes its own.
		b.log.Info("left out: an integer position_ids buffer, which no runtime reads", "tensor", s.Name)
		return nil
	}
	if !t.IsGGML() {
		// GGUF has no such type (u8, bool, u16, ...); sd.cpp skips them too.
		b.warn(fmt.Sprintf("%s: tensor %q: %s has no GGUF type: left out", s.Tensor.File, s.Name, t))
		return nil
	}
	if err := s.Err(); err != nil {
		return err
	}
	st := s.Tensor
	name := s.Name
	if b.rename != nil {
		name = b.rename(s.Name)
		if prev, dup := renamed[name]; dup {
			// T5 files may hold the tied encoder.embed_tokens beside shared.
			b.warn(fmt.Sprintf("%s: tensor %q: llama.cpp names it %q like %q: left out", s.Tensor.File, s.Name, name, prev))
			return nil
		}
		renamed[name] = s.Name
	}
	out := pipeline.Output{Name: name, Type: t, Shape: c.Shape, Source: &st, From: s.TypeName(), Note: c.Reason}
	reshaped := folded || c.Reshaped
	if reshaped {
		b.res.reshaped++
		if c.Reshaped {
			b.res.rowsOf256++
		}
		b.origShape = append(b.origShape, struct {
			name  string
			shape []int64
		}{name, s.Shape()})
		if folded && !c.Reshaped {
			out.Note += fmt.Sprintf("; %d-D shape folded to %v (comfy.gguf.orig_shape keeps %v)", len(s.Shape()), c.Shape, s.Shape())
		}
	}
	if err := b.ggufProducer(&out, s, c, reshaped, used); err != nil {
		return err
	}
	if err := b.permute(&out, s.Name); err != nil {
		return err
	}
	if _, err := out.Bytes(); err != nil {
		return fmt.Errorf("tensor %q: %v", s.Name, err)
	}
	b.plan.Outputs = append(b.plan.Outputs, out)
	return nil
}

// ggufProducer gives out its producer: the raw bytes when the type and
// rows stay (any shape for one-element blocks), else the tensor decoded
// and encoded, with its importance weights and llama.cpp's norm shift.
func (b *builder) ggufProducer(out *pipeline.Output, s *tensor.Source, c mix.Choice, reshaped bool, used map[string]bool) error {
	t := out.Type
	shift := b.normShift(out.Name)
	if shift != 0 && !t.Quantized() {
		// llama.cpp writes norms in F32, where adding 1 to an F16 or
		// BF16 scale is exact.
		t, out.Type = formats.F32, formats.F32
	}
	if t == s.Tensor.Type && s.Module == nil && shift == 0 && (t.Info().BlockSize == 1 || slices.Equal(c.Shape, s.Tensor.Shape)) {
		out.Producer = pipeline.Copy(b.m, s.Tensor)
		out.Note = withCopied(out.Note)
		return nil
	}
	codec, err := quant.Encoder(t)
	if err != nil {
		return fmt.Errorf("%s: tensor %q: %w", b.opts.Input, s.Name, err)
	}
	if !s.Float() {
		return fmt.Errorf("%s: tensor %q: cannot convert %s to %s", s.Tensor.File, s.Name, s.TypeName(), t)
	}
	var weights []float32
	if t.Quantized() && b.imp != nil && codec.UsesWeights {
		if weights, err = b.imatrixWeights(out, s, c.Shape[len(c.Shape)-1], reshaped, used); err != nil {
			return err
		}
	}
	if weights == nil && codec.NeedsWeights {
		return option.Errorf("%s: tensor %q: %s needs an importance matrix entry for it (give %s, or another type with %s)", b.opts.Input, s.Name, t, option.Name("Imatrix"), option.Name("TensorTypes"))
	}
	enc := pipeline.EncodeRows(t, codec.Quantize, weights)
	if shift != 0 {
		enc = shifted(enc, shift)
		out.Note += fmt.Sprintf("; %+g on the norm scale (llama.cpp's %s convention)", shift, b.llama.Title)
	}
	out.Producer = pipeline.Convert(s, t, enc)
	return nil
}

// imatrixWeights returns the imatrix entry of tensor s for rows of rowLen (by
// its name, or as sd.cpp converts names), nil when there is none; an
// entry that does not fit a reshaped tensor is left out with a warning.
func (b *builder) imatrixWeights(out *pipeline.Output, s *tensor.Source, rowLen int64, reshaped bool, used map[string]bool) ([]float32, error) {
	key := s.Name
	v, ok, err := b.imp.Vector(key, rowLen)
	if !ok && b.imatrixKey != nil {
		// sd.cpp stores its entries under converted names.
		if k := b.imatrixKey(s.Name); k != s.Name {
			key = k
			v, ok, err = b.imp.Vector(key, rowLen)
		}
	}
	switch {
	case err != nil && reshaped:
		b.warn(fmt.Sprintf("tensor %q: %v (reshaped to rows of %d): quantized without it", s.Name, err, rowLen))
		used[key] = true
	case err != nil:
		return nil, fmt.Errorf("%s: tensor %q: %v", b.opts.Input, s.Name, err)
	case ok:
		used[key] = true
		out.Note = "imatrix; " + out.Note
		return v, nil
	default:
		b.res.ImatrixMissing = append(b.res.ImatrixMissing, s.Name)
	}
	return nil, nil
}

// positionIDs reports a text encoder's integer position_ids buffer (CLIP's
// arange(77) as transformers saves it), which GGUF outputs leave out as
// sd-cli's convert does.
func positionIDs(s *tensor.Source) bool {
	return strings.HasSuffix(s.Name, "embeddings.position_ids") && s.Module == nil && !s.Float()
}

// moduleKinds are the component kinds whose linear layers become ComfyUI
// modules by default. ComfyUI's own converters quantize the diffusion
// model only; measured in sd-cli on SD 1.5 (docs/families.md), modules on
// the text encoder cost quality that the bytes saved do not buy back.
var moduleKinds = []string{family.KindDiffusion}

// floatType is the type a tensor left out of the modules is written in:
// its own float type, or F16 for anything else.
func (b *builder) floatType(s *tensor.Source) formats.DType {
	if t := s.Tensor.Type; s.Module == nil && t.Info().Float && !t.Quantized() {
		return t
	}
	return formats.F16
}

// planConvrot plans a ComfyUI safetensors output: every eligible linear
// weight (what a Q8_0 mix would quantize: 2-D, named .weight, not a norm,
// not on the architecture's keep list) becomes a comfy_quant module; other
// float tensors get the mix's high-precision type, the rest are copied.
func (b *builder) planConvrot(ct convrot.Type, rules func(string) (comfyChoice, bool)) error {
	srcs := b.dm.Sources
	inputs := make([]mix.Input, len(srcs))
	for i, s := range srcs {
		typ := s.Tensor.Type
		if s.Module != nil {
			typ = formats.F32
		}
		// The mix decides on the shape ggml would see; the output keeps the
		// torch shape (ComfyUI builds Wan's patch embedding as a Conv3d
		// from the 5-D weight, a plain float op, never a module).
		shape, _ := fold(s.Shape())
		inputs[i] = mix.Input{Name: s.Name, Shape: shape, Source: typ}
	}
	q8, _ := mix.Parse("q8_0")
	choices, err := mix.Choose(q8, inputs, mix.Options{Arch: b.arch, Layout: b.layout, Pure: true})
	if err != nil {
		return err
	}
	for i, s := range srcs {
		if err := s.Err(); err != nil {
			return err
		}
		if err := b.planConvrotTensor(s, choices[i], ct, rules); err != nil {
			return err
		}
	}
	return nil
}

// planConvrotTensor plans tensor s: a ComfyUI module of type ct (or the
// one a user rule gives) when it is a linear layer the family lets be
// one, else a float tensor of the type the q8_0 mix chose (c).
func (b *builder) planConvrotTensor(s *tensor.Source, c mix.Choice, ct convrot.Type, rules func(string) (comfyChoice, bool)) error {
	quantize, mt, ruleNote, err := b.moduleChoice(s, &c, ct, rules)
	if err != nil {
		return err
	}
	var p convrot.Layer
	if quantize {
		p, err = convrot.NewLayer(formats.Tensor{Name: s.Name, Type: formats.F32, Shape: s.Shape()}, convrot.Options{Type: mt, GroupSize: b.opts.GroupSize})
		if err != nil {
			return err
		}
		if p.Keep {
			// The format's blocks do not fit this weight.
			quantize, c.Reason, c.Type = false, p.Note, b.floatType(s)
			if ruleNote != "" {
				ruleNote += ": " + p.Note
			}
			b.log.Info("kept float", "tensor", s.Name, "note", p.Note)
		}
	}
	if quantize {
		return b.moduleOutputs(s, p, mt, ruleNote)
	}
	return b.floatOutput(s, c, ruleNote)
}

// moduleChoice decides whether tensor s becomes a module, of which type,
// and the user rule's note; c's type and reason change when it stays a
// float.
func (b *builder) moduleChoice(s *tensor.Source, c *mix.Choice, ct convrot.Type, rules func(string) (comfyChoice, bool)) (quantize bool, mt convrot.Type, ruleNote string, err error) {
	if n := len(s.Shape()); n > 4 {
		c.Reason = fmt.Sprintf("%d-D convolution kernel, kept %d-D: ComfyUI builds a Conv3d from it, and modules go on linear layers only", n, n)
	}
	fam, cls := b.layout.Classify(s.Name, s.Shape())
	quantize, mt = c.Quantized && cls.Linear, ct
	if quantize && fam != nil && !slices.Contains(moduleKinds, fam.Kind) {
		quantize, c.Reason = false, fmt.Sprintf("%s layer of %s: ComfyUI modules go on the diffusion model's linear layers only", strings.ReplaceAll(fam.Kind, "_", " "), fam.ID)
		c.Type = b.floatType(s)
	}
	if quantize && cls.ModuleKeep != "" && convrot.QuantizesActivations(ct) {
		// The runtimes run INT8 modules as W8A8; these layers are
		// where that costs most (a measured choice, docs/families.md).
		quantize, c.Reason = false, fmt.Sprintf("kept float in INT8 module outputs for %s (%s): measured, docs/families.md", fam.ID, cls.ModuleKeep)
		c.Type = b.floatType(s)
	}
	if !quantize && c.Quantized && !cls.Linear && cls.NotLinear != "" {
		c.Reason = cls.NotLinear + ": no ComfyUI module"
	}
	if rules == nil {
		return quantize, mt, "", nil
	}
	r, ok := rules(s.Name)
	if !ok {
		return quantize, mt, "", nil
	}
	switch {
	case r.keep:
		c.Type = s.Tensor.Type
		if s.Module != nil {
			// A module's scales and marker are not carried over: keep it as decoded floats.
			c.Type = formats.BF16
			return false, mt, "user rule: keep (ComfyUI module decoded to bf16)", nil
		}
		return false, mt, "user rule: keep", nil
	case r.float != 0:
		c.Type = r.float
		return false, mt, "user rule: " + r.float.String(), nil
	case !cls.Linear && strings.HasSuffix(s.Name, ".weight") && len(s.Shape()) >= 2:
		// ComfyUI builds modules from Linear layers only, and
		// sd.cpp refuses an int8 lookup table: a rule that asks
		// for one on a convolution or a table is a mistake, not a
		// preference. (1-D norm weights and biases that a
		// layer's pattern also matches are skipped below.)
		why := cls.NotLinear
		if why == "" {
			why = fmt.Sprintf("a %d-D weight (a convolution)", len(s.Shape()))
		}
		return false, mt, "", fmt.Errorf("%s: tensor %q: a rule asks for %s, but ComfyUI modules go on linear layers only and this is %s", b.opts.Input, s.Name, r.module, why)
	case !cls.Linear:
		// Like sd.cpp's rules, a module type never applies to a
		// bias or buffer that a pattern for its layer also matches.
		return false, mt, fmt.Sprintf("user rule asks for %s, but only linear .weight tensors can be ComfyUI modules; %s", r.module, c.Reason), nil
	}
	return true, r.module, "user rule", nil
}

// moduleOutputs plans the tensors of layer p's module of type mt (weight,
// scales, marker, input scale), each noting why.
func (b *builder) moduleOutputs(s *tensor.Source, p convrot.Layer, mt convrot.Type, ruleNote string) error {
	reason := "linear weight: " + mt.String()
	if ruleNote != "" {
		reason = ruleNote + ": " + mt.String()
	}
	var outs []pipeline.Output
	var err error
	switch {
	case convrot.BlockType(mt):
		weights, note, err := b.blockWeights(s, mt)
		if err != nil {
			return err
		}
		reason = note + reason
		outs = blockOutputs(p, s, weights)
	default:
		if outs, err = convrotOutputs(p, s); err != nil {
			return err
		}
	}
	if p.Config.Convrot || p.Config.Rotated() {
		reason += fmt.Sprintf(" (group %d)", p.Config.GroupSize)
	}
	if o, note, ok := b.inputScale(s, p, mt); ok {
		outs = append(outs, o)
		reason += note
	}
	b.res.modules[convrot.TypeName(p.Config)]++
	if p.Note != "" {
		reason += "; " + p.Note
		b.log.Info("plain int8 fallback", "tensor", s.Name, "note", p.Note)
	}
	for j := range outs {
		o := &outs[j]
		o.Note = reason
		if j == 0 {
			o.From = s.TypeName()
		} else {
			o.Note = "part of module " + p.Module
		}
		if _, err := o.Bytes(); err != nil {
			return fmt.Errorf("tensor %q: %v", o.Name, err)
		}
	}
	b.plan.Outputs = append(b.plan.Outputs, outs...)
	return nil
}

// floatOutput plans tensor s as a float of the type c chose (F16 for a
// quantized choice or a module's integer weight), copied when it keeps
// its type.
func (b *builder) floatOutput(s *tensor.Source, c mix.Choice, ruleNote string) error {
	st := s.Tensor
	t := c.Type
	if t.Quantized() || (s.Module != nil && !t.Info().Float) {
		t = formats.F16
	}
	if _, ok := t.SafetensorsName(); !ok {
		return fmt.Errorf("%s: tensor %q: %s has no safetensors dtype", s.Tensor.File, s.Name, t)
	}
	reason := c.Reason
	if ruleNote != "" {
		reason = ruleNote
	}
	out := pipeline.Output{Name: s.Name, Type: t, Shape: s.Shape(), Source: &st, From: s.TypeName(), Note: reason}
	if t == s.Tensor.Type && s.Module == nil {
		out.Producer = pipeline.Copy(b.m, s.Tensor)
		out.Note = withCopied(out.Note)
	} else {
		codec, err := quant.Encoder(t)
		if err != nil {
			return fmt.Errorf("%s: tensor %q: %w", b.opts.Input, s.Name, err)
		}
		out.Producer = pipeline.Convert(s, t, pipeline.EncodeRows(t, codec.Quantize, nil))
	}
	if _, err := out.Bytes(); err != nil {
		return fmt.Errorf("tensor %q: %v", s.Name, err)
	}
	b.plan.Outputs = append(b.plan.Outputs, out)
	return nil
}

// metadata computes the output metadata. GGUF (default preset):
// general.architecture first (when ComfyUI-GGUF has a name for the
// model), the input's GGUF keys except those recomputed here,
// general.quantization_version 2, general.file_type, quantize.imatrix.*,
// then --metadata, then comfy.gguf.orig_shape.* for every tensor stored
// with another shape (also with preset none: loaders need them).
// Safetensors: the input's safetensors metadata (default preset) and
// --metadata.
func (b *builder) metadata(user [][2]string) {
	preset := b.opts.MetadataPreset != "none"
	inMeta := b.m.Metadata()
	if b.res.Format == "safetensors" {
		meta := map[string]string{}
		if preset {
			// Any input's model metadata (a GGUF's head counts and tokenizer
			// included), as strings; arrays do not fit and are reported.
			carried, dropped := pipeline.CarryMetadata(inMeta, "safetensors")
			for _, kv := range carried {
				meta[kv.Key] = kv.Value.(string)
			}
			b.reportDropped(dropped)
		}
		for _, kv := range user {
			meta[kv[0]] = kv[1]
		}
		keys := make([]string, 0, len(meta))
		for k := range meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.plan.Header.Metadata = append(b.plan.Header.Metadata, formats.KV{Key: k, Type: formats.TypeString, Value: meta[k]})
		}
		return
	}
	var meta formats.Metadata
	set := func(kv formats.KV) {
		for i := range meta {
			if meta[i].Key == kv.Key {
				meta[i] = kv
				return
			}
		}
		meta = append(meta, kv)
	}
	u32 := func(k string, v uint32) formats.KV { return formats.KV{Key: k, Type: formats.TypeUint32, Value: v} }
	str := func(k, v string) formats.KV { return formats.KV{Key: k, Type: formats.TypeString, Value: v} }
	if preset {
		if b.res.ComfyArch != "" {
			set(str("general.architecture", b.res.ComfyArch))
		} else {
			w := fmt.Sprintf("no general.architecture written: ComfyUI-GGUF has no name for architecture %q", b.res.Arch)
			if b.res.Arch == "" {
				w = "no general.architecture written: the architecture was not recognised"
			}
			b.log.Warn(w)
			b.res.Warnings = append(b.res.Warnings, w)
		}
		// The input's model metadata, from any format (safetensors'
		// "format": "pt" describes that container only). Storage keys
		// (file type, imatrix, comfy.gguf.orig_shape, ...) are recomputed.
		carried, _ := pipeline.CarryMetadata(inMeta, "gguf")
		for _, kv := range carried {
			if kv.Key != "general.architecture" && !(kv.Key == "format" && b.m.Info().Format == "safetensors") {
				set(kv)
			}
		}
		set(u32("general.quantization_version", 2))
		set(u32("general.file_type", b.res.FType.ID))
		if b.imp != nil {
			set(str("quantize.imatrix.file", b.imp.File()))
			set(str("quantize.imatrix.dataset", b.imp.Dataset()))
			set(formats.KV{Key: "quantize.imatrix.entries_count", Type: formats.TypeInt32, Value: int32(len(b.imp.Entries))})
			set(formats.KV{Key: "quantize.imatrix.chunks_count", Type: formats.TypeInt32, Value: int32(b.imp.Chunks)})
		}
	}
	for _, kv := range b.tokenizer {
		set(kv)
	}
	for _, kv := range user {
		set(str(kv[0], kv[1]))
	}
	for _, o := range b.origShape {
		key := gguf.OrigShapePrefix + o.name
		dims := make([]int32, len(o.shape))
		for i, d := range o.shape {
			dims[i] = int32(d)
		}
		set(formats.KV{Key: key, Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: dims}})
	}
	// Full n_dims (no trimming), alignment 32 and end padding, as ggml writes.
	b.plan.Header = formats.WriteOptions{Metadata: meta, PadEnd: true}
}

// withCopied notes in a reason that the bytes are copied unchanged.
func withCopied(reason string) string {
	if strings.HasSuffix(reason, "copied") {
		return reason
	}
	return reason + "; copied"
}

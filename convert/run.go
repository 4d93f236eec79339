package convert

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"

	// The writers sd-cli's convert writes: GGUF, and safetensors by extension.
	_ "github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
	"github.com/sdtool/sdtool/tensor"
)

// Options is one `sdtool convert` invocation: what to read and what to
// write. How to run it (threads, memory, --force) is pipeline.Options.
type Options struct {
	// Inputs maps input flags (family.Inputs: "model", "vae", ...) to paths.
	Inputs map[string]string
	// Output is the output path: .safetensors writes safetensors, anything
	// else GGUF (as sd-cli does).
	Output string
	// Type is --type ("" for none), Rules the --tensor-type-rules text.
	Type, Rules string
	// Imatrix lists the --imatrix files (legacy .dat or GGUF), summed as sd.cpp does.
	Imatrix []string
	// ConvertName stores sd.cpp's converted names (--convert-name). The
	// imatrix lookup always uses converted names, as sd.cpp does.
	ConvertName bool
	// Dequantize decodes ComfyUI int8/FP8 modules to floats first (sd-cli keeps them as they are).
	Dequantize bool
	// NoMetadata writes no metadata at all, as sd-cli does: its exact bytes
	// for inputs that have metadata. Without it the inputs' model metadata
	// is carried (pipeline.CarryMetadata); inputs without any give sd-cli's
	// bytes either way.
	NoMetadata bool
	// Metadata are --metadata KEY=VALUE strings added to the output's metadata.
	Metadata []string
	// Tokenizers are --tokenizer paths whose tokenizers are embedded in the
	// output's metadata, where generate reads them (CLIP and SentencePiece,
	// GGUF or safetensors).
	Tokenizers []string
	// Log receives warnings and per-tensor records; nil discards them.
	Log *slog.Logger
}

// Plan's errors for options without an input file or without an output.
var (
	ErrNoInput  = errors.New("no input")
	ErrNoOutput = errors.New("no output")
)

// Plan opens the inputs and plans the conversion; every error in the
// arguments is found here, before anything is written. The plan keeps the
// inputs open until its Close.
func Plan(opts *Options) (_ *pipeline.Plan, err error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(opts.Inputs) == 0 {
		return nil, ErrNoInput
	}
	if opts.Output == "" {
		return nil, ErrNoOutput
	}
	pol, userMeta, err := policyOf(opts)
	if err != nil {
		return nil, err
	}
	format, toks, err := outputOf(opts)
	if err != nil {
		return nil, err
	}
	plan := &pipeline.Plan{Path: opts.Output, Format: format,
		// sd-cli's layout: compact unpadded safetensors with no metadata,
		// or GGUF v3 with no KV pairs, trimmed dims and no end padding.
		Header: formats.WriteOptions{TrimDims: true, NoPadding: true}}
	defer func() {
		if err != nil {
			plan.Close()
		}
	}()
	in, err := openInputs(plan, opts, log)
	if err != nil {
		return nil, err
	}
	sources, warnings, err := Load(in.models)
	if err != nil {
		return nil, err
	}
	if len(sources) == 0 {
		return nil, fmt.Errorf("nothing to convert: the inputs hold no tensor that sd.cpp loads (%d skipped)", len(warnings))
	}
	version := detectVersion(sources)
	log.Info("detected model version (for name conversion)", "version", version)
	pol.ImatrixKey = func(n string) string { return names.Convert(n, version) }
	if opts.ConvertName {
		if err := checkConvertedNames(sources, version); err != nil {
			return nil, err
		}
		pol.ConvertName = pol.ImatrixKey
	}
	for _, w := range warnings {
		if w.Unused {
			log.Info(w.String())
		} else {
			log.Warn(w.String())
		}
	}
	unused, err := build(plan, sources, pol)
	if err != nil {
		return nil, err
	}
	if err := checkOutputs(plan, pol, log); err != nil {
		return nil, err
	}
	if !opts.NoMetadata {
		carryMetadata(plan, format.Name, in.mdFrom, in.mds, userMeta, log)
		for i, e := range toks {
			plan.Header.Metadata = e.apply(plan.Header.Metadata)
			plan.Notes = append(plan.Notes, fmt.Sprintf("tokenizer: %s embedded from %s", e.What, opts.Tokenizers[i]))
		}
	}
	noteImatrix(plan, sources, unused, pol)
	if err := plan.Check(); err != nil {
		return nil, err
	}
	return plan, nil
}

// policyOf reads the options that decide the tensors' types (type, rules,
// importance matrices) and the user's metadata items.
func policyOf(opts *Options) (pol policy, userMeta [][2]string, err error) {
	userMeta, err = pipeline.ParseMetadataItems(opts.Metadata)
	if err != nil {
		return pol, nil, err
	}
	if opts.NoMetadata && (len(userMeta) > 0 || len(opts.Tokenizers) > 0) {
		return pol, nil, option.Errorf("%s writes none: it excludes %s and %s", option.Name("NoMetadata"), option.Name("Metadata"), option.Name("Tokenizers"))
	}
	if opts.Type != "" {
		if pol.Type, err = ParseTargetType(opts.Type); err != nil {
			return pol, nil, option.Errorf("%s: %w", option.Name("Type"), err)
		}
		pol.HasType = true
	}
	if opts.Rules != "" {
		if pol.Rules, err = ParseRules(opts.Rules); err != nil {
			return pol, nil, option.Errorf("%s: %w", option.Name("Rules"), err)
		}
	}
	if len(opts.Imatrix) > 0 {
		var ms []*imatrix.Matrix
		for _, path := range opts.Imatrix {
			m, err := imatrix.Open(path)
			if err != nil {
				return pol, nil, option.Errorf("%s: %w", option.Name("Imatrix"), err)
			}
			if err := m.Validate(path); err != nil {
				return pol, nil, option.Errorf("%s: %w", option.Name("Imatrix"), err)
			}
			ms = append(ms, m)
		}
		if pol.Imatrix, err = imatrix.SumStored(opts.Imatrix, ms); err != nil {
			return pol, nil, option.Errorf("%s: %w", option.Name("Imatrix"), err)
		}
	}
	return pol, userMeta, nil
}

// outputOf checks the output's name and loads the tokenizers to embed in
// it.
func outputOf(opts *Options) (formats.Creator, []embedded, error) {
	// sd-cli writes safetensors for that extension and GGUF for any other;
	// a GGUF named out.bin misleads every tool that goes by the name, so
	// sdtool refuses other extensions, as quantize and merge do.
	if err := pipeline.FolderOutput(opts.Output, "gguf"); err != nil {
		return formats.Creator{}, nil, err
	}
	format, err := formats.CreatorFor(opts.Output)
	if err != nil || format.Name != "gguf" && format.Name != "safetensors" {
		return formats.Creator{}, nil, fmt.Errorf("%s: the output must end in .gguf or .safetensors, not %q", opts.Output, filepath.Ext(opts.Output))
	}
	var toks []embedded
	for _, p := range opts.Tokenizers {
		e, err := loadTokenizer(p, format.Name)
		if err != nil {
			return formats.Creator{}, nil, err
		}
		toks = append(toks, e)
	}
	return format, toks, nil
}

// inputs are the opened input files by input flag, and their metadata in
// the order sd-cli reads them.
type inputs struct {
	models map[string]formats.Model
	mdFrom []string
	mds    []formats.Metadata
}

// openInputs opens the input files in family.ConvertInputs() order, each
// used by the plan (closed with it), ComfyUI modules dequantized when asked.
func openInputs(plan *pipeline.Plan, opts *Options, log *slog.Logger) (inputs, error) {
	in := inputs{models: map[string]formats.Model{}}
	for _, c := range family.ConvertInputs() {
		path, ok := opts.Inputs[c.Flag]
		if !ok {
			continue
		}
		m, err := formats.Open(path)
		if err != nil {
			return in, err
		}
		plan.Use(m)
		in.mdFrom, in.mds = append(in.mdFrom, path), append(in.mds, m.Metadata())
		if opts.Dequantize {
			view, n, err := tensor.Dequantized(m)
			if err != nil {
				return in, err
			}
			if n > 0 {
				log.Info("dequantizing ComfyUI quantized modules", "file", path, "modules", n)
			}
			m = view
		}
		in.models[c.Flag] = m
		for _, w := range m.Info().Warnings {
			log.Warn(w)
		}
	}
	for flag := range opts.Inputs {
		if _, ok := in.models[flag]; !ok {
			return in, fmt.Errorf("unknown input component %q", flag)
		}
	}
	return in, nil
}

// checkOutputs notes the rules that matched nothing and the tensors
// decoded to floats, refuses types a safetensors output cannot hold, and
// logs the tensors' notes.
func checkOutputs(plan *pipeline.Plan, pol policy, log *slog.Logger) error {
	names := make([]string, len(plan.Outputs))
	for i, o := range plan.Outputs {
		names[i] = o.Name
	}
	for _, r := range pipeline.UnmatchedRules(pol.Rules, names) {
		w := fmt.Sprintf("--tensor-type-rules rule %q matches no tensor", r.Pattern+"="+r.Value.String())
		log.Warn(w)
		plan.Notes = append(plan.Notes, w)
	}
	decoded, beyondSDCLI := 0, 0
	for _, o := range plan.Outputs {
		if o.Source.Type.Quantized() && !o.Type.Quantized() {
			decoded++
		}
		if strings.Contains(o.Note, "dequantized from") {
			beyondSDCLI++
		}
	}
	if decoded > 0 {
		note := fmt.Sprintf("dequantized: %s decoded to a float type", pipeline.Count(decoded, "quantized tensor", "quantized tensors"))
		if beyondSDCLI > 0 {
			note += fmt.Sprintf(" (%d of them sd-cli would keep as stored)", beyondSDCLI)
		}
		plan.Notes = append(plan.Notes, note)
	}
	if plan.Format.Name == "safetensors" {
		for _, o := range plan.Outputs {
			if !plan.Format.Stores(o.Type) {
				return fmt.Errorf("%s: tensor %q would be %s, which safetensors cannot hold; write a .gguf or choose f16/bf16/f32", plan.Path, o.Name, o.Type)
			}
		}
	}
	for _, o := range plan.Outputs {
		if o.Note != "" && o.Source.Type != o.Type || strings.Contains(o.Note, "folded") || strings.Contains(o.Note, "no float conversion") {
			log.Info("tensor note", "tensor", o.Name, "note", o.Note)
		}
	}
	return nil
}

// noteImatrix says how the importance matrix matched the model: entries
// for tensors that stay floats are expected (sd.cpp never converts
// time_embed, and sd-cli collects it all the same); one that names no
// tensor of the model says the imatrix is for another.
func noteImatrix(plan *pipeline.Plan, sources []Source, unused []string, pol policy) {
	keys := map[string]bool{}
	if len(unused) > 0 {
		for _, src := range sources {
			keys[pol.ImatrixKey(src.Name)] = true
		}
	}
	var foreign, kept []string
	for _, name := range unused {
		if keys[name] {
			kept = append(kept, name)
		} else {
			foreign = append(foreign, name)
		}
	}
	if len(foreign) > 0 {
		plan.Notes = append(plan.Notes, fmt.Sprintf("warning: imatrix: %s no tensor of the model (%s): is it for another model?",
			pipeline.Count(len(foreign), "entry names", "entries name"), pipeline.Examples(foreign)))
	}
	if len(kept) > 0 {
		plan.Notes = append(plan.Notes, fmt.Sprintf("imatrix: %s for tensors that stay unquantized: %s",
			pipeline.Count(len(kept), "entry is", "entries are"), pipeline.Examples(kept)))
	}
	if used := len(pol.Imatrix) - len(unused); len(pol.Imatrix) > 0 {
		plan.Notes = append(plan.Notes, fmt.Sprintf("imatrix: %d of %d entries weight the quantization", used, len(pol.Imatrix)))
	}
}

// carryMetadata gives the output the inputs' model metadata (first input
// first where two disagree) and the --metadata items, and notes what it
// left out. Safetensors' "format": "pt" is a mark of that container, which
// sd-cli does not write, so a checkpoint with no other metadata converts to
// sd-cli's exact bytes.
func carryMetadata(plan *pipeline.Plan, format string, from []string, mds []formats.Metadata, user [][2]string, log *slog.Logger) {
	carried := make([]formats.Metadata, len(mds))
	var dropped []pipeline.DroppedKey
	for i, md := range mds {
		var d []pipeline.DroppedKey
		carried[i], d = pipeline.CarryMetadata(md, format)
		for j := range d {
			d[j].Reason = from[i] + ": " + d[j].Reason
		}
		dropped = append(dropped, d...)
		kept := carried[i][:0]
		for _, kv := range carried[i] {
			if kv.Key != "format" {
				kept = append(kept, kv)
			}
		}
		carried[i] = kept
	}
	md, conflicts := pipeline.MergeMetadata(from, carried)
	dropped = append(dropped, conflicts...)
	for _, kv := range user {
		md = pipeline.SetMetadata(md, formats.KV{Key: kv[0], Type: formats.TypeString, Value: kv[1]})
	}
	plan.Header.Metadata = md
	if n := len(md) - len(user); n > 0 {
		plan.Notes = append(plan.Notes, fmt.Sprintf("metadata: %s carried from the input (--no-metadata writes sd-cli's exact bytes)", pipeline.Count(n, "key", "keys")))
	}
	for _, d := range dropped {
		plan.Notes = append(plan.Notes, fmt.Sprintf("warning: metadata %s not carried: %s", d.Key, d.Reason))
	}
}

// detectVersion returns the version sd.cpp's detection gives the export
// names and shapes, as the family table states it.
func detectVersion(sources []Source) names.Version {
	ts := make([]formats.Tensor, len(sources))
	for i, s := range sources {
		ts[i] = formats.Tensor{Name: s.Name, Type: s.Storage, Shape: s.Shape}
	}
	return names.VersionOf(family.Detect(ts, nil))
}

// checkConvertedNames refuses a conversion whose renamed tensors collide
// (sd-cli would silently keep one of them).
func checkConvertedNames(sources []Source, v names.Version) error {
	list := make([]string, len(sources))
	for i, s := range sources {
		list[i] = s.Name
	}
	_, err := names.ConvertAll(list, v)
	return err
}

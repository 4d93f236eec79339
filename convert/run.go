package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
	"github.com/sdtool/sdtool/tensor"
)

// Config is one `sdtool convert` invocation.
type Config struct {
	// Inputs maps Component flags ("model", "vae", ...) to paths.
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
	// Threads, MaxMemory and Force are passed to the pipeline.
	Threads   int
	MaxMemory int64
	Force     bool
	// DryRun plans without writing.
	DryRun bool
	// Dequantize decodes ComfyUI int8/FP8 modules to floats first (sd-cli keeps them as they are).
	Dequantize bool
	// Progress receives bytes written and the total.
	Progress func(done, total int64)
	// Log receives warnings and per-tensor records.
	Log *slog.Logger
}

// Prepare opens the inputs and builds the plan; every error in the
// arguments is found here, before anything is written. The caller closes
// the returned models.
func Prepare(cfg *Config) (*Result, []formats.Model, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(cfg.Inputs) == 0 {
		return nil, nil, errors.New("no input: give at least one of -m, --diffusion-model, --vae, --clip_l, --clip_g, --t5xxl, --llm")
	}
	if cfg.Output == "" {
		return nil, nil, errors.New("no output: give -o OUT.gguf or -o OUT.safetensors")
	}
	var opts Options
	var err error
	if cfg.Type != "" {
		if opts.Type, err = ParseTargetType(cfg.Type); err != nil {
			return nil, nil, fmt.Errorf("--type: %v", err)
		}
		opts.HasType = true
	}
	if cfg.Rules != "" {
		if opts.Rules, err = ParseRules(cfg.Rules); err != nil {
			return nil, nil, fmt.Errorf("--tensor-type-rules: %v", err)
		}
	}
	if len(cfg.Imatrix) > 0 {
		var ms []*imatrix.Matrix
		for _, path := range cfg.Imatrix {
			m, err := imatrix.Open(path)
			if err != nil {
				return nil, nil, fmt.Errorf("--imatrix: %w", err)
			}
			if err := m.Validate(path); err != nil {
				return nil, nil, fmt.Errorf("--imatrix: %w", err)
			}
			ms = append(ms, m)
		}
		if opts.Imatrix, err = imatrix.SumStored(cfg.Imatrix, ms); err != nil {
			return nil, nil, fmt.Errorf("--imatrix: %w", err)
		}
	}
	models := map[string]formats.Model{}
	var opened []formats.Model
	for _, c := range Components {
		path, ok := cfg.Inputs[c.Flag]
		if !ok {
			continue
		}
		m, err := formats.Open(path)
		if err != nil {
			closeAll(opened)
			return nil, nil, err
		}
		opened = append(opened, m)
		if cfg.Dequantize {
			view, n, err := tensor.Dequantized(m)
			if err != nil {
				closeAll(opened)
				return nil, nil, err
			}
			if n > 0 {
				log.Info("dequantizing ComfyUI quantized modules", "file", path, "modules", n)
			}
			m = view
		}
		models[c.Flag] = m
		for _, w := range m.Info().Warnings {
			log.Warn(w)
		}
	}
	for flag := range cfg.Inputs {
		if _, ok := models[flag]; !ok {
			closeAll(opened)
			return nil, nil, fmt.Errorf("unknown input component %q", flag)
		}
	}
	sources, warnings, err := Load(models)
	if err != nil {
		closeAll(opened)
		return nil, nil, err
	}
	if len(sources) == 0 {
		closeAll(opened)
		return nil, nil, fmt.Errorf("nothing to convert: the inputs hold no tensor that sd.cpp loads (%d skipped)", len(warnings))
	}
	version := detectVersion(sources)
	log.Info("detected model version (for name conversion)", "version", version)
	opts.ImatrixKey = func(n string) string { return names.Convert(n, version) }
	if cfg.ConvertName {
		if err := checkConvertedNames(sources, version); err != nil {
			closeAll(opened)
			return nil, nil, err
		}
		opts.ConvertName = opts.ImatrixKey
	}
	for _, w := range warnings {
		if w.Unused {
			log.Info(w.String())
		} else {
			log.Warn(w.String())
		}
	}
	res, err := Build(sources, opts)
	if err != nil {
		closeAll(opened)
		return nil, nil, err
	}
	if isSafetensors(cfg.Output) {
		for _, r := range res.Rows {
			if _, ok := r.To.SafetensorsName(); !ok {
				closeAll(opened)
				return nil, nil, fmt.Errorf("%s: tensor %q would be %s, which safetensors cannot hold; write a .gguf or choose f16/bf16/f32", cfg.Output, r.Name, r.To)
			}
		}
	}
	for _, r := range res.Rows {
		if r.Note != "" && r.From != r.To || strings.Contains(r.Note, "folded") || strings.Contains(r.Note, "no float conversion") {
			log.Info("tensor note", "tensor", r.Name, "note", r.Note)
		}
	}
	if len(res.UnusedImatrix) > 0 {
		log.Warn("imatrix entries matched no quantized tensor", "count", len(res.UnusedImatrix), "first", res.UnusedImatrix[0])
	}
	return res, opened, nil
}

// Run converts as cfg says; with DryRun it only plans. It returns the plan.
func Run(ctx context.Context, cfg *Config) (*Result, error) {
	res, models, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	defer closeAll(models)
	if cfg.DryRun {
		return res, nil
	}
	var inputs []string
	for _, m := range models {
		inputs = append(inputs, m.Info().Files...)
		inputs = append(inputs, m.Path())
	}
	err = pipeline.Run(ctx, res.Plan, pipeline.Options{
		OutPath: cfg.Output, NewWriter: writerFor(cfg.Output), Threads: cfg.Threads, MaxMemory: cfg.MaxMemory,
		Force: cfg.Force, Inputs: inputs, Progress: cfg.Progress, Logger: cfg.Log,
	})
	return res, err
}

// detectVersion runs sd.cpp's version detection on the export names and shapes.
func detectVersion(sources []Source) names.Version {
	ts := make([]formats.Tensor, len(sources))
	for i, s := range sources {
		ts[i] = formats.Tensor{Name: s.Name, Type: s.Storage, Shape: s.Shape}
	}
	return names.DetectVersion(ts)
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

func isSafetensors(path string) bool {
	return strings.EqualFold(filepath.Ext(path), ".safetensors")
}

// writerFor returns sd-cli's writer for the output name: compact unpadded
// safetensors with no metadata, or GGUF v3 with no KV pairs, trimmed dims
// and no padding after the last tensor.
func writerFor(out string) pipeline.NewWriterFunc {
	if isSafetensors(out) {
		return func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
			return safetensors.NewWriter(w, ts, nil, &safetensors.WriterOptions{NoPadding: true})
		}
	}
	return func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
		return gguf.NewWriter(w, ts, nil, &gguf.WriterOptions{TrimDims: true})
	}
}

func closeAll(ms []formats.Model) {
	for _, m := range ms {
		m.Close()
	}
}

// Totals sums a plan's rows: bytes before and after, parameters, and the
// bits per weight of the output.
func Totals(rows []Row) (in, out, params int64, bpw float64) {
	for _, r := range rows {
		in += r.BytesIn
		out += r.BytesOut
		n, _ := formats.Elements(r.Shape)
		params += n
	}
	if params > 0 {
		bpw = float64(out*8) / float64(params)
	}
	return
}

package quantize

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/bytedance/sonic"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/pipeline"
)

// ManifestName is the file a ladder writes beside its outputs.
const ManifestName = "manifest.json"

// ManifestSchema names the manifest's layout (docs/ladder-manifest.md).
const ManifestSchema = "sdtool.ladder/1"

// IsLadder reports whether a --type value lists several types.
func IsLadder(typ string) bool { return strings.Contains(typ, ",") }

// SplitTypes reads a comma-separated --type list, refusing empty items and
// a type given twice (two rungs would write one file).
func SplitTypes(typ string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, t := range strings.Split(typ, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, option.Errorf("%s %q: an empty item in the list", option.Name("Type"), typ)
		}
		if seen[strings.ToLower(t)] {
			return nil, option.Errorf("%s %q: %s is listed twice", option.Name("Type"), typ, t)
		}
		seen[strings.ToLower(t)] = true
		out = append(out, t)
	}
	return out, nil
}

// Rung is one output of a ladder.
type Rung struct {
	// Type is the --type of this output, as listed.
	Type string
	// Plan writes it.
	Plan *pipeline.Plan
	// Report is what planning found (format, mix, consumers).
	Report *Report
}

// Ladder is several quantizations of one model, written from one read of it.
type Ladder struct {
	// Rungs are the outputs in --type order.
	Rungs []Rung
	// Manifest is the path of the manifest.json written after the outputs.
	Manifest string

	input string
	model formats.Model
}

// OutputPath fills a ladder's -o pattern for one type: {type} becomes the
// type as listed and {ext} the extension of its format.
func OutputPath(pattern, typ, format string) string {
	return strings.NewReplacer("{type}", typ, "{ext}", format).Replace(pattern)
}

// PlanLadder opens opts.Input once and plans one output for each of types
// with opts (whose Type is ignored); opts.Output is a pattern holding
// {type} (and usually {ext}, see OutputPath). The GGUF-only settings
// (Imatrix, Pure, ReshapeConv) apply to the GGUF rungs. Every problem of every rung
// is found before anything is written. The manifest goes into the folder
// of the first output.
func PlanLadder(opts *Options, types []string) (*Ladder, error) {
	if len(types) == 0 {
		return nil, option.Errorf("no %s", option.Name("Type"))
	}
	if opts.Output == "" {
		return nil, errors.New("no output: give -o with {type} and {ext}, e.g. -o 'out/model-{type}.{ext}'")
	}
	if !strings.Contains(opts.Output, "{type}") {
		return nil, fmt.Errorf("-o %q: a list of types needs {type} in the output name (e.g. 'out/model-{type}.{ext}'), or every file would have one name", opts.Output)
	}
	if opts.Input == "" {
		return nil, errors.New("no input model")
	}
	m, err := formats.Open(opts.Input)
	if err != nil {
		return nil, err
	}
	l := &Ladder{input: opts.Input, model: m}
	for _, typ := range types {
		o := *opts
		o.Type = typ
		if formatOf(typ) == "safetensors" {
			// GGUF-only settings apply to the GGUF rungs of a ladder; the
			// imatrix also to the ComfyUI types whose block scales it steers.
			o.Pure, o.ReshapeConv = false, false
			if ct, err := convrot.ParseType(typ); err != nil || !convrot.UsesImportance(ct) {
				o.Imatrix = nil
			}
		}
		o.Output = OutputPath(opts.Output, typ, formatOf(typ))
		plan, rep, err := PlanModel(&o, m)
		if err != nil {
			l.Close()
			return nil, option.Errorf("%s %s: %w", option.Name("Type"), typ, err)
		}
		l.Rungs = append(l.Rungs, Rung{Type: typ, Plan: plan, Report: rep})
	}
	l.Manifest = filepath.Join(filepath.Dir(l.Rungs[0].Plan.Path), ManifestName)
	for _, r := range l.Rungs {
		if absPath(r.Plan.Path) == absPath(l.Manifest) {
			l.Close()
			return nil, fmt.Errorf("%s: an output is named like the ladder's manifest", r.Plan.Path)
		}
	}
	return l, nil
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// formatOf returns the format a --type writes ("gguf" or "safetensors"),
// for {ext}; an unknown type gets "gguf" and Plan names the problem.
func formatOf(typ string) string {
	for _, d := range TypeTable {
		if d.Output != "safetensors" {
			continue
		}
		for _, n := range strings.Split(d.Name, ",") {
			if strings.EqualFold(strings.TrimSpace(n), typ) {
				return "safetensors"
			}
		}
	}
	return "gguf"
}

// Plans returns the rungs' plans in order.
func (l *Ladder) Plans() []*pipeline.Plan {
	out := make([]*pipeline.Plan, len(l.Rungs))
	for i, r := range l.Rungs {
		out[i] = r.Plan
	}
	return out
}

// Close closes the plans and the model.
func (l *Ladder) Close() error {
	var errs []error
	for _, r := range l.Rungs {
		errs = append(errs, r.Plan.Close())
	}
	if l.model != nil {
		errs = append(errs, l.model.Close())
		l.model = nil
	}
	return errors.Join(errs...)
}

// Run writes every rung in one pass over the input (pipeline.RunAll) and
// then the manifest, all through the atomic publish. The manifest is
// checked before any work, so that an existing one without ro.Force
// fails at once.
func (l *Ladder) Run(ctx context.Context, ro pipeline.Options) (*Manifest, error) {
	inputs := l.Rungs[0].Plan.Inputs
	if err := pipeline.CheckOutput(l.Manifest, inputs, ro.Force); err != nil {
		return nil, err
	}
	written, err := pipeline.RunAll(ctx, l.Plans(), ro)
	if err != nil {
		return nil, err
	}
	man, err := l.manifest(written)
	if err != nil {
		return nil, err
	}
	if err := WriteManifest(ctx, l.Manifest, man, pipeline.PublishOptions{Force: ro.Force, Inputs: inputs}); err != nil {
		return nil, err
	}
	return man, nil
}

// Manifest is the manifest.json of a ladder (docs/ladder-manifest.md).
type Manifest struct {
	// Schema is ManifestSchema.
	Schema string `json:"schema"`
	// Source describes the input.
	Source ManifestSource `json:"source"`
	// Files lists the outputs in --type order.
	Files []ManifestFile `json:"files"`
}

// ManifestSource is the input of a ladder.
type ManifestSource struct {
	// File is the input as given.
	File string `json:"file"`
	// Format is the input's container ("safetensors", "gguf", ...).
	Format string `json:"format"`
	// Arch is the detected architecture ("" when unknown).
	Arch string `json:"arch"`
	// Weights counts the elements of the tensors the outputs are made from.
	Weights int64 `json:"weights"`
}

// ManifestFile is one output of a ladder.
type ManifestFile struct {
	// File is the output's path relative to the manifest's folder.
	File string `json:"file"`
	// Type is the --type as listed; Format is "gguf" or "safetensors".
	Type   string `json:"type"`
	Format string `json:"format"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// BitsPerWeight is 8 times the tensor data bytes over the weights.
	BitsPerWeight float64 `json:"bits_per_weight"`
	// SHA256 is the hex digest of the file.
	SHA256 string `json:"sha256"`
	// Loads lists the consumers that can load the file.
	Loads []string `json:"loads"`
	// Consumers says for every --target consumer whether it can load the file, and why not.
	Consumers []Consumer `json:"consumers"`
	// Quality holds the figures of a validation run (sdtool report), nil until one ran.
	Quality *Quality `json:"quality"`
	// Shards lists the files of a split GGUF (--split-max-size); File and
	// SHA256 are then the first shard's, Size the size of all.
	Shards []ManifestShard `json:"shards,omitempty"`
}

// ManifestShard is one file of a split output.
type ManifestShard struct {
	// File is the shard's path relative to the manifest's folder.
	File string `json:"file"`
	// Size is the shard's size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the hex digest of the shard.
	SHA256 string `json:"sha256"`
}

// Quality is how close a file's images came to the source's in a validation run.
type Quality struct {
	// PSNR is the mean peak signal-to-noise ratio in dB over the images;
	// +Inf when every image is identical to the source's (written as
	// "psnr_db": null with "identical": true, JSON having no infinity).
	PSNR float64 `json:"psnr_db"`
	// SSIM is the mean structural similarity over the images.
	SSIM float64 `json:"ssim"`
	// Images is the number of images (prompts times seeds) compared.
	Images int `json:"images"`
	// Report is the report's path relative to the manifest's folder, "" when none was written.
	Report string `json:"report,omitempty"`
	// Error says why the report could not render or compare the file ("" when
	// it could); PSNR, SSIM and Images are then zero.
	Error string `json:"error,omitempty"`
}

// qualityJSON is Quality as the manifest stores it.
type qualityJSON struct {
	PSNR      *float64 `json:"psnr_db"`
	Identical bool     `json:"identical,omitempty"`
	SSIM      float64  `json:"ssim"`
	Images    int      `json:"images"`
	Report    string   `json:"report,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// MarshalJSON writes q with an infinite PSNR (identical images) as null
// and "identical": true, and any other non-finite PSNR as null.
func (q Quality) MarshalJSON() ([]byte, error) {
	j := qualityJSON{SSIM: q.SSIM, Images: q.Images, Report: q.Report, Error: q.Error, Identical: math.IsInf(q.PSNR, 1)}
	if !math.IsInf(q.PSNR, 0) && !math.IsNaN(q.PSNR) {
		j.PSNR = &q.PSNR
	}
	return sonic.ConfigStd.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (q *Quality) UnmarshalJSON(b []byte) error {
	var j qualityJSON
	if err := sonic.ConfigStd.Unmarshal(b, &j); err != nil {
		return err
	}
	*q = Quality{SSIM: j.SSIM, Images: j.Images, Report: j.Report, Error: j.Error, PSNR: math.NaN()}
	switch {
	case j.PSNR != nil:
		q.PSNR = *j.PSNR
	case j.Identical:
		q.PSNR = math.Inf(1)
	}
	return nil
}

// manifest builds the manifest of the written rungs.
func (l *Ladder) manifest(written []pipeline.Written) (*Manifest, error) {
	man := &Manifest{Schema: ManifestSchema, Source: ManifestSource{File: l.input, Format: l.model.Info().Format}}
	dir := filepath.Dir(l.Manifest)
	for i, r := range l.Rungs {
		w := written[i]
		rel, err := filepath.Rel(dir, w.Path)
		if err != nil {
			rel = w.Path
		}
		var data, weights int64
		for j := range r.Plan.Outputs {
			o := &r.Plan.Outputs[j]
			n, _ := o.Bytes()
			data += n
			if o.Source != nil {
				weights += o.Source.Elements() // a packed 4-bit weight holds two per element
			}
		}
		if i == 0 {
			man.Source.Arch = r.Report.Arch
			man.Source.Weights = weights
		}
		f := ManifestFile{File: filepath.ToSlash(rel), Type: r.Type, Format: r.Report.Format, Size: w.Bytes,
			SHA256: hex.EncodeToString(w.SHA256[:]), Loads: []string{}, Consumers: r.Report.Consumers}
		for _, sh := range w.Shards {
			rel, err := filepath.Rel(dir, sh.Path)
			if err != nil {
				rel = sh.Path
			}
			f.Shards = append(f.Shards, ManifestShard{File: filepath.ToSlash(rel), Size: sh.Bytes, SHA256: hex.EncodeToString(sh.SHA256[:])})
		}
		if weights > 0 {
			f.BitsPerWeight = float64(8*data) / float64(weights)
		}
		for _, c := range r.Report.Consumers {
			if c.OK {
				f.Loads = append(f.Loads, c.Name)
			}
		}
		if f.Consumers == nil {
			f.Consumers = []Consumer{}
		}
		man.Files = append(man.Files, f)
	}
	return man, nil
}

// WriteManifest writes man as indented JSON to path through the atomic publish.
func WriteManifest(ctx context.Context, path string, man *Manifest, o pipeline.PublishOptions) error {
	b, err := EncodeManifest(man)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return pipeline.WriteAtomic(ctx, path, o, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// EncodeManifest returns the bytes of man as WriteManifest writes them, so
// that a command can learn that it cannot be written before it writes
// anything else.
func EncodeManifest(man *Manifest) ([]byte, error) {
	b, err := sonic.ConfigStd.MarshalIndent(man, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ReadManifest reads a ladder's manifest.json.
func ReadManifest(path string) (*Manifest, error) {
	b, err := formats.ReadRegular(path, formats.MaxTextFile)
	if err != nil {
		return nil, err
	}
	return ParseManifest(b, path)
}

// ParseManifest reads the bytes of a manifest.json; name is the file in messages.
func ParseManifest(b []byte, name string) (*Manifest, error) {
	var man Manifest
	if err := sonic.ConfigStd.Unmarshal(b, &man); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if man.Schema != ManifestSchema {
		return nil, fmt.Errorf("%s: schema %q, want %q", name, man.Schema, ManifestSchema)
	}
	for i, f := range man.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.File)) {
			return nil, fmt.Errorf("%s: files[%d]: file %q is not a path inside the manifest's folder", name, i, f.File)
		}
		if d, err := hex.DecodeString(f.SHA256); err != nil || len(d) != 32 || strings.ToLower(f.SHA256) != f.SHA256 {
			return nil, fmt.Errorf("%s: files[%d]: sha256 %q is not 64 lower-case hex digits", name, i, f.SHA256)
		}
	}
	return &man, nil
}

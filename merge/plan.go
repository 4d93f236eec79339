package merge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/pipeline"
)

// Plan is a merge ready to run: the pipeline plan, where each output tensor
// comes from, and the opened inputs (Close releases them).
type Plan struct {
	// Output is the output path; its extension chose the format.
	Output string
	// Format is "safetensors" or "gguf".
	Format string
	// Pipeline lists the output tensors with their producers, in write order.
	Pipeline pipeline.Plan
	// Entries says, for each output tensor in order, where it comes from.
	Entries []Entry
	// Inputs lists every input file (all shards), which the output must not be.
	Inputs []string
	// Metadata is written into a safetensors output.
	Metadata map[string]string
	// GGUFMetadata is written into a GGUF output.
	GGUFMetadata formats.Metadata

	models []formats.Model
}

// Entry describes one output tensor for --dry-run.
type Entry struct {
	// Name is the output tensor name.
	Name string
	// Type is the output type.
	Type formats.DType
	// Shape is the output shape (PyTorch order).
	Shape []int64
	// File is the input file the tensor comes from (A's for arithmetic merges).
	File string
	// Source is the tensor's name in File.
	Source string
	// How says what is done: "copy", "dequantize q8_0", "weighted_sum alpha=0.5", ...
	How string
}

// Options tunes how a plan runs.
type Options struct {
	// Force replaces an existing output.
	Force bool
	// Threads is the number of workers (0: all cores).
	Threads int
	// MaxMemory bounds the chunk buffers in flight (0: pipeline.DefaultMaxMemory).
	MaxMemory int64
	// ChunkBytes is the largest chunk (0: the pipeline's default).
	ChunkBytes int64
	// Progress receives bytes written and the total.
	Progress func(done, total int64)
	// Log receives per-tensor debug records; nil discards them.
	Log *slog.Logger
}

// Close releases the opened inputs.
func (p *Plan) Close() error {
	var errs []error
	for _, m := range p.models {
		errs = append(errs, m.Close())
	}
	p.models = nil
	return errors.Join(errs...)
}

// Run writes the output through the pipeline: OUT.partial, renamed when
// complete, removed on any error or interruption.
func (p *Plan) Run(ctx context.Context, o Options) error {
	return pipeline.Run(ctx, &p.Pipeline, pipeline.Options{
		OutPath:    p.Output,
		NewWriter:  p.newWriter(),
		Threads:    o.Threads,
		MaxMemory:  o.MaxMemory,
		ChunkBytes: o.ChunkBytes,
		Force:      o.Force,
		Inputs:     p.Inputs,
		Progress:   o.Progress,
		Logger:     o.Log,
	})
}

func (p *Plan) newWriter() pipeline.NewWriterFunc {
	if p.Format == "gguf" {
		return func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
			return gguf.NewWriter(w, ts, p.GGUFMetadata, nil)
		}
	}
	return func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
		return safetensors.NewWriter(w, ts, p.Metadata, &safetensors.WriterOptions{Name: p.Output})
	}
}

// WriteDryRun prints every output tensor with its source, then the totals.
func (p *Plan) WriteDryRun(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTPUT TENSOR\tTYPE\tSHAPE\tFROM\tSOURCE TENSOR\tHOW")
	for _, e := range p.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\n", e.Name, e.Type, e.Shape, e.File, e.Source, e.How)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	total, err := p.Pipeline.Bytes()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%d tensors, %s of data -> %s (%s); nothing written (--dry-run)\n",
		len(p.Entries), pipeline.HumanBytes(total), p.Output, p.Format)
	return err
}

// outputFormat picks the output format from the extension.
func outputFormat(out string) (string, error) {
	if out == "" {
		return "", errors.New("no output file (-o)")
	}
	switch strings.ToLower(filepath.Ext(out)) {
	case ".safetensors":
		return "safetensors", nil
	case ".gguf":
		return "gguf", nil
	}
	return "", fmt.Errorf("%s: the output must end in .safetensors or .gguf", out)
}

// storable reports whether format can hold tensors of type t.
func storable(format string, t formats.DType) bool {
	if format == "gguf" {
		return t.IsGGML()
	}
	_, ok := t.SafetensorsName()
	return ok
}

// addInputs records m's files as inputs of the plan and keeps m to close.
func (p *Plan) addInput(m formats.Model) {
	p.models = append(p.models, m)
	files := m.Info().Files
	if len(files) == 0 {
		files = []string{m.Path()}
	}
	p.Inputs = append(p.Inputs, files...)
	if m.Path() != files[0] {
		p.Inputs = append(p.Inputs, m.Path())
	}
}

// stringMetadata turns a string map into GGUF metadata in key order.
func stringMetadata(m map[string]string) formats.Metadata {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	md := make(formats.Metadata, 0, len(keys))
	for _, k := range keys {
		md = append(md, formats.KV{Key: k, Type: formats.TypeString, Value: m[k]})
	}
	return md
}

// errList collects errors, keeping the first few in full and counting the rest.
type errList struct {
	errs    []error
	dropped int
}

const maxErrors = 20

func (l *errList) add(err error) {
	if len(l.errs) < maxErrors {
		l.errs = append(l.errs, err)
	} else {
		l.dropped++
	}
}

func (l *errList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	errs := l.errs
	if l.dropped > 0 {
		errs = append(errs, fmt.Errorf("and %d more errors", l.dropped))
	}
	return errors.Join(errs...)
}

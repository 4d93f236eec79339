package merge

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sdtool/sdtool/formats"
	// The formats a merge reads and writes.
	_ "github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// newPlan starts the plan of an output file: its format from the
// extension (.safetensors or .gguf).
func newPlan(out string) (*pipeline.Plan, error) {
	if out == "" {
		return nil, errors.New("no output file (-o)")
	}
	if err := pipeline.FolderOutput(out, "safetensors"); err != nil {
		return nil, err
	}
	format, err := formats.CreatorFor(out)
	if err != nil {
		return nil, fmt.Errorf("%s: the output must end in .safetensors or .gguf", out)
	}
	return &pipeline.Plan{Path: out, Format: format}, nil
}

// add appends an output that comes from src, with how it is made as its note.
func add(p *pipeline.Plan, name string, typ formats.DType, shape []int64, how string, prod pipeline.Producer, src *tensor.Source) {
	t := src.Tensor
	o := pipeline.Output{Name: name, Type: typ, Shape: shape, Producer: prod, Source: &t, Note: how}
	if src.Module != nil {
		o.From = src.TypeName()
	}
	p.Outputs = append(p.Outputs, o)
}

// stringMetadata turns a string map into metadata in key order.
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

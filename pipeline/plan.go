package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/tensor"
)

// Producer fills the output bytes of a range of rows of one output tensor.
type Producer interface {
	// Produce writes rows [firstRow, firstRow+nRows) of the output into dst,
	// which holds exactly nRows*RowBytes bytes. scratch belongs to the
	// calling worker and may be used for temporary buffers; Produce is called
	// concurrently for different chunks and must not keep dst or scratch.
	Produce(ctx context.Context, dst []byte, firstRow, nRows int64, scratch *tensor.Scratch) error
}

// ProducerFunc adapts a function to the Producer interface.
type ProducerFunc func(ctx context.Context, dst []byte, firstRow, nRows int64, scratch *tensor.Scratch) error

// Produce calls f.
func (f ProducerFunc) Produce(ctx context.Context, dst []byte, firstRow, nRows int64, scratch *tensor.Scratch) error {
	return f(ctx, dst, firstRow, nRows, scratch)
}

// Preparer is implemented by producers that check the output they fill
// before anything is written, and that need scratch memory per row (the
// engine sizes chunks so that output plus scratch stays within a chunk).
// The engine calls Prepare once per output, before the first Produce; a
// producer that implements it belongs to one output.
type Preparer interface {
	// Prepare checks that the producer can fill o and returns the scratch
	// bytes one row of o needs.
	Prepare(o *Output) (scratchPerRow int64, err error)
}

// Output is one tensor of the output file.
type Output struct {
	// Name is the tensor's name in the output.
	Name string
	// Type is the output element type.
	Type formats.DType
	// Shape is in PyTorch order (outermost first, ggml ne[0] last).
	Shape []int64
	// Producer fills the tensor's bytes.
	Producer Producer
	// Source is the input tensor this output comes from, for summaries and
	// logs; nil when there is no single source (a combination, a new tensor).
	Source *formats.Tensor
	// From names the source's type in the dry-run table when
	// Source.Type.String() does not say it ("int8_convrot" for a ComfyUI
	// module); "" means Source.Type.
	From string
	// Note says, in the dry-run table, why the output has its type or how
	// it is made ("copied", "row of 320 is not a multiple of ...").
	Note string
}

// Elements returns the number of elements of the output, 0 when the shape is invalid.
func (o *Output) Elements() int64 {
	n, _ := formats.Elements(o.Shape)
	return n
}

// RowLength returns the number of elements of a row (the innermost dim; 1 for scalars).
func (o *Output) RowLength() int64 {
	if len(o.Shape) == 0 {
		return 1
	}
	return o.Shape[len(o.Shape)-1]
}

// Bytes returns the output's size in bytes, or an error when the type and
// shape do not fit (a row that is not a whole number of blocks).
func (o *Output) Bytes() (int64, error) {
	if !o.Type.Valid() {
		return 0, fmt.Errorf("unknown tensor type %d", uint16(o.Type))
	}
	return o.Type.Bytes(o.Shape)
}

// Rows returns the number of row units the output is produced in and the
// bytes of each. A row is the innermost dimension when it holds whole blocks
// of the type; otherwise (packed sub-byte types whose rows split a byte) the
// whole tensor is a single unit. Empty tensors have no rows; scalars have one.
func (o *Output) Rows() (rows, rowBytes int64, err error) {
	size, err := o.Bytes()
	if err != nil {
		return 0, 0, err
	}
	n := o.Elements()
	if n == 0 || size == 0 {
		return 0, 0, nil
	}
	rl := o.RowLength()
	if rb, err := o.Type.RowBytes(rl); err == nil && rb > 0 {
		return n / rl, rb, nil
	}
	return 1, size, nil
}

// Descriptor returns the output as a tensor descriptor (name, type, shape,
// size) for a writer's header; File and Offset are left zero.
func (o *Output) Descriptor() (formats.Tensor, error) {
	size, err := o.Bytes()
	if err != nil {
		return formats.Tensor{}, err
	}
	return formats.Tensor{Name: o.Name, Type: o.Type, Shape: append([]int64(nil), o.Shape...), Size: size}, nil
}

// Plan is everything a writing command decides before any byte is
// written: the output file, its format and header, every output tensor in
// write order, the inputs it reads (which the output must never replace)
// and the notes its summary ends with. convert, quantize and merge each
// turn their options into a Plan; Run writes it; WriteTable prints it for
// --dry-run.
type Plan struct {
	// Path is the output file; it is written as Path+".partial" and renamed
	// when complete.
	Path string
	// Format is the output's file format (usually formats.CreatorFor(Path)).
	Format formats.Creator
	// Header holds the format's settings (metadata, layout options).
	Header formats.WriteOptions
	// Outputs are the output tensors in header order.
	Outputs []Output
	// Inputs are the paths of every input file (all shards).
	Inputs []string
	// Split, when active, writes a GGUF output as the shards of a split
	// GGUF with gguf-split's keys and cuts (see Shards); Path names the
	// whole and is not written itself.
	Split gguf.SplitLimits
	// Notes are the lines the summary ends with: what the command found
	// that the table does not show (consumers, unused imatrix entries).
	Notes []string

	models []formats.Model
}

// Use records m as an input of the plan: its files join Inputs and it is
// closed with the plan.
func (p *Plan) Use(m formats.Model) {
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

// Close closes the models the plan uses.
func (p *Plan) Close() error {
	var errs []error
	for _, m := range p.models {
		errs = append(errs, m.Close())
	}
	p.models = nil
	return errors.Join(errs...)
}

// Check validates the plan (Validate) and builds the output's header
// without writing it, so that what the format refuses (a type it cannot
// hold, zero outer dims in GGUF, bad metadata) is an error of the plan
// rather than of a started run. Errors are prefixed with Path.
func (p *Plan) Check() error {
	if p.Format.New == nil {
		return fmt.Errorf("%s: no output format", p.Path)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%s: %w", p.Path, err)
	}
	ts, err := p.Tensors()
	if err != nil {
		return fmt.Errorf("%s: %w", p.Path, err)
	}
	if _, err := p.Format.New(nil, ts, p.header()); err != nil {
		return fmt.Errorf("%s: %w", p.Path, err)
	}
	return nil
}

// header returns Header with the output's name filled in.
func (p *Plan) header() formats.WriteOptions {
	h := p.Header
	if h.Name == "" {
		h.Name = p.Path
	}
	return h
}

// Tensors returns the writer descriptors of every output in order.
func (p *Plan) Tensors() ([]formats.Tensor, error) {
	out := make([]formats.Tensor, 0, len(p.Outputs))
	for i := range p.Outputs {
		o := &p.Outputs[i]
		size, err := o.Bytes()
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %v", o.Name, err)
		}
		// The shape is shared, not copied as Descriptor does: writers
		// only read it, and a copy per tensor adds up on large headers.
		out = append(out, formats.Tensor{Name: o.Name, Type: o.Type, Shape: o.Shape, Size: size})
	}
	return out, nil
}

// Validate checks the plan without running any producer: names present and
// unique, types known, sizes computable, a producer for every tensor with
// data.
func (p *Plan) Validate() error {
	seen := formats.NewNameIndex(len(p.Outputs), func(i int) string { return p.Outputs[i].Name })
	var errs []error
	for i := range p.Outputs {
		o := &p.Outputs[i]
		if o.Name == "" {
			errs = append(errs, fmt.Errorf("output %d has no name", i))
			continue
		}
		if seen.Add(i) >= 0 {
			errs = append(errs, fmt.Errorf("tensor %q appears twice in the plan", o.Name))
			continue
		}
		if _, err := formats.Elements(o.Shape); err != nil {
			errs = append(errs, fmt.Errorf("tensor %q: %v", o.Name, err))
			continue
		}
		rows, _, err := o.Rows()
		if err != nil {
			errs = append(errs, fmt.Errorf("tensor %q: %v", o.Name, err))
			continue
		}
		if rows > 0 && o.Producer == nil {
			errs = append(errs, fmt.Errorf("tensor %q: no producer", o.Name))
		}
	}
	return errors.Join(errs...)
}

// Bytes returns the total data bytes of the plan's outputs.
func (p *Plan) Bytes() (int64, error) {
	var total int64
	for i := range p.Outputs {
		n, err := p.Outputs[i].Bytes()
		if err != nil {
			return 0, fmt.Errorf("tensor %q: %v", p.Outputs[i].Name, err)
		}
		total += n
	}
	return total, nil
}

// Package pipeline is the streaming engine every writing command runs on: a
// Plan lists every output tensor (name, type, shape, producer) before any
// byte is written, Run produces the tensors' bytes in row chunks on a worker
// pool within a memory budget, writes them strictly in header order through a
// formats.TensorWriter, and publishes the result atomically (OUT.partial,
// fsync, rename).
//
// A command builds Outputs from opened models with Copy (raw bytes) or
// Convert (decode to float32, encode), or with its own Producer; prints
// Plan.Summary for --dry-run; and otherwise calls Run with a context from
// SignalContext, a NewWriter for its format and, for a terminal, the Update
// method of a progress.Bar (package pipeline/progress) as Options.Progress.
// Inputs are read with ReadAt into bounded buffers, never mapped or read
// whole, so peak memory does not grow with the model.
package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/sdtool/sdtool/formats"
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

// Plan lists every output tensor, in the order they are written.
type Plan struct {
	// Outputs are the output tensors in header order.
	Outputs []Output
}

// Tensors returns the writer descriptors of every output in order.
func (p *Plan) Tensors() ([]formats.Tensor, error) {
	out := make([]formats.Tensor, 0, len(p.Outputs))
	for i := range p.Outputs {
		d, err := p.Outputs[i].Descriptor()
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %v", p.Outputs[i].Name, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// Validate checks the plan without running any producer: names present and
// unique, types known, sizes computable, a producer for every tensor with
// data.
func (p *Plan) Validate() error {
	seen := make(map[string]bool, len(p.Outputs))
	var errs []error
	for i := range p.Outputs {
		o := &p.Outputs[i]
		if o.Name == "" {
			errs = append(errs, fmt.Errorf("output %d has no name", i))
			continue
		}
		if seen[o.Name] {
			errs = append(errs, fmt.Errorf("tensor %q appears twice in the plan", o.Name))
			continue
		}
		seen[o.Name] = true
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

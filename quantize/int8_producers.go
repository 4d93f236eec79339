package quantize

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// int8Weight quantizes the weight of a ComfyUI INT8 module and keeps each
// row's scale, so that the module's weight_scale is written from them
// instead of decoding the weight a second time. It is a pipeline.Decoder,
// so a ladder shares its decoded rows with the other files' outputs.
type int8Weight struct {
	src    *tensor.Source
	q      convrot.Int8Rows
	scales []float32     // one per row, filled as rows are encoded
	left   atomic.Int64  // rows not yet encoded
	done   chan struct{} // closed when every row has its scale
}

// Prepare checks that the output has rows of the quantizer's length and
// returns the scratch of one row.
func (w *int8Weight) Prepare(o *pipeline.Output) (int64, error) {
	if err := w.src.Err(); err != nil {
		return 0, err
	}
	rows, _, err := o.Rows()
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %v", o.Name, err)
	}
	if rows*int64(w.q.In) != w.src.Elements() || o.RowLength() != int64(w.q.In) {
		return 0, fmt.Errorf("tensor %q: %d rows of %d do not hold the %d elements of %q", o.Name, rows, w.q.In, w.src.Elements(), w.src.Name)
	}
	w.scales = make([]float32, rows)
	w.left.Store(rows)
	w.done = make(chan struct{})
	return 8*int64(w.q.In) + w.src.RawBytes(int64(w.q.In)), nil
}

// Produce decodes and quantizes rows [firstRow, firstRow+nRows).
func (w *int8Weight) Produce(_ context.Context, dst []byte, firstRow, nRows int64, s *tensor.Scratch) error {
	if nRows <= 0 {
		return nil
	}
	f := s.Float32s(0, int(nRows)*w.q.In)
	if err := w.src.Read(f, firstRow*int64(w.q.In), s); err != nil {
		return err
	}
	return w.Encode(dst, f, firstRow, nRows)
}

// Decodes returns the source and the elements of one row.
func (w *int8Weight) Decodes() (*tensor.Source, int64) { return w.src, int64(w.q.In) }

// Encode quantizes the rows' values and records their scales.
func (w *int8Weight) Encode(dst []byte, f []float32, firstRow, nRows int64) error {
	if w.done == nil {
		return fmt.Errorf("tensor %q: INT8 producer used before Prepare", w.src.Name)
	}
	if err := w.q.Quantize(dst, w.scales[firstRow:firstRow+nRows], f); err != nil {
		return err
	}
	if w.left.Add(-nRows) == 0 {
		close(w.done)
	}
	return nil
}

// int8Scale writes the weight_scale of an int8Weight: the pipeline writes
// it after the weight, so every scale is known (or the run was cancelled)
// by the time it is produced.
type int8Scale struct{ w *int8Weight }

// Produce writes the scales of rows [firstRow, firstRow+nRows) once the weight is encoded.
func (p int8Scale) Produce(ctx context.Context, dst []byte, firstRow, nRows int64, _ *tensor.Scratch) error {
	if nRows <= 0 {
		return nil
	}
	if p.w.done == nil {
		return fmt.Errorf("tensor %q: weight_scale produced before its weight was prepared", p.w.src.Name)
	}
	select {
	case <-p.w.done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	copy(dst, convrot.PutScales(dst[:0], p.w.scales[firstRow:firstRow+nRows]))
	return nil
}

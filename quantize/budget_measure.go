package quantize

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/workpool"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// measureChunkElements bounds the floats one worker reads at a time while
// measuring (whole rows; a longer row is a chunk of its own), so memory
// is a few chunks per worker whatever the model's size.
const measureChunkElements = 1 << 20

// measured is one tensor's measurement: every candidate's size and error,
// the (weighted) energy of its weights and the elements read.
type measured struct {
	cands    []CandidateError
	energy   float64
	elements int64
}

// measureTask is one tensor to measure.
type measureTask struct {
	src     *tensor.Source
	rowLen  int64
	rows    int64
	types   []formats.DType
	weights []float32 // the quantizer's importance weights (nil: none)
	colW    []float32 // the error's column weights (nil: all one)
	chunks  int64
	perRows int64 // rows per chunk
}

// measureTasks prepares the measurement of every eligible tensor: its
// rows, importance weights, chunks and the candidate types that fit it,
// in cands' order. Nothing is read yet.
func (b *builder) measureTasks(elig []budgetTensor, cands []formats.DType) ([]measureTask, error) {
	tasks := make([]measureTask, len(elig))
	for i, e := range elig {
		s := b.dm.Sources[e.index]
		rowLen := e.shape[len(e.shape)-1]
		n := s.Elements()
		if rowLen <= 0 || n%rowLen != 0 {
			return nil, fmt.Errorf("%s: tensor %q: %d elements are not rows of %d", b.opts.Input, e.name, n, rowLen)
		}
		t := measureTask{src: s, rowLen: rowLen, rows: n / rowLen}
		t.weights = b.importance(e.name, rowLen)
		t.colW = t.weights
		for _, c := range cands {
			if rowLen%int64(c.Info().BlockSize) != 0 {
				continue
			}
			codec, err := quant.Encoder(c)
			if err != nil {
				continue
			}
			if _, err := quant.Decoder(c); err != nil {
				continue
			}
			if codec.NeedsWeights && t.weights == nil {
				continue
			}
			t.types = append(t.types, c)
		}
		if len(t.types) == 0 {
			return nil, fmt.Errorf("%s: tensor %q: no budget candidate fits rows of %d elements", b.opts.Input, e.name, rowLen)
		}
		t.perRows = max(1, measureChunkElements/rowLen)
		t.chunks = (t.rows + t.perRows - 1) / t.perRows
		tasks[i] = t
	}
	return tasks, nil
}

// bytes returns the tensor's data size in type typ.
func (t *measureTask) bytes(typ formats.DType) int64 {
	n, _ := typ.Bytes([]int64{t.rows, t.rowLen})
	return n
}

// measure computes, for every eligible tensor, each fitting candidate's
// error: the tensor is read in chunks of whole rows through the same
// reader the pipeline uses, each chunk is quantized to every candidate
// (with the importance weights the real run uses) and decoded, and the
// squared differences, weighted by column when an imatrix covers the
// tensor, are summed in float64. Workers share the chunks; partial sums
// are kept per chunk and added in order, so the result does not depend on
// the thread count.
func (b *builder) measure(tasks []measureTask, threads int) ([]measured, error) {
	bo := b.opts.Budget
	ctx := bo.Context
	if ctx == nil {
		ctx = context.Background()
	}
	type job struct{ task, chunk int }
	var jobs []job
	for i, t := range tasks {
		for c := range t.chunks {
			jobs = append(jobs, job{i, int(c)})
		}
	}
	// One slot per chunk: len(types) squared errors and the energy.
	partial := make([][]float64, len(tasks))
	left := make([]atomic.Int64, len(tasks)) // chunks not yet measured, per tensor
	var total int64
	for i, t := range tasks {
		partial[i] = make([]float64, int(t.chunks)*(len(t.types)+1))
		left[i].Store(t.chunks)
		total += t.src.Tensor.Size
	}
	if bo.Start != nil {
		bo.Start(len(tasks), total)
	}
	var doneBytes, doneTensors atomic.Int64
	scratch := make([]tensor.Scratch, workpool.Size(threads, len(jobs)))
	err := workpool.Each(ctx, len(jobs), threads, func(w, j int) error {
		t := &tasks[jobs[j].task]
		nt := len(t.types)
		slot := partial[jobs[j].task][jobs[j].chunk*(nt+1):][:nt+1]
		if err := t.measureChunk(int64(jobs[j].chunk), slot, &scratch[w]); err != nil {
			return err
		}
		if left[jobs[j].task].Add(-1) == 0 {
			doneTensors.Add(1)
		}
		if bo.Progress != nil {
			// The chunk's share of the tensor's stored bytes (the shares add up to its size).
			r0 := int64(jobs[j].chunk) * t.perRows
			r1 := min(r0+t.perRows, t.rows)
			size := t.src.Tensor.Size
			bo.Progress(doneBytes.Add(size*r1/t.rows-size*r0/t.rows), total)
		}
		return nil
	})
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Cause(ctx)) {
		return nil, fmt.Errorf("%s: %w (%v) while measuring the budget, after %d of %s; nothing was written",
			b.opts.Input, pipeline.ErrInterrupted, context.Cause(ctx), doneTensors.Load(), pipeline.Count(len(tasks), "tensor", "tensors"))
	}
	if err != nil {
		return nil, err
	}
	out := make([]measured, len(tasks))
	for i, t := range tasks {
		nt := len(t.types)
		sse := make([]float64, nt+1)
		for c := range t.chunks {
			for k, v := range partial[i][int(c)*(nt+1):][:nt+1] {
				sse[k] += v
			}
		}
		m := measured{energy: sse[nt], elements: t.rows * t.rowLen}
		for k, typ := range t.types {
			size, _ := typ.Bytes([]int64{t.rows, t.rowLen})
			m.cands = append(m.cands, CandidateError{Type: typ, Bytes: size, SSE: sse[k]})
		}
		out[i] = m
	}
	return out, nil
}

// measureChunk measures rows [c*perRows, ...) of t into slot: one squared
// error per candidate, then the weights' energy.
func (t *measureTask) measureChunk(c int64, slot []float64, s *tensor.Scratch) error {
	r0 := c * t.perRows
	nr := min(t.perRows, t.rows-r0)
	n := int(nr * t.rowLen)
	x := s.Float32s(0, n)
	if err := t.src.Read(x, r0*t.rowLen, s); err != nil {
		return err
	}
	y := s.Float32s(1, n)
	rowLen := int(t.rowLen)
	for k, typ := range t.types {
		rb, err := typ.RowBytes(t.rowLen)
		if err != nil {
			return err
		}
		q := s.Bytes(0, int(rb*nr))
		var w []float32
		if codec, _ := quant.Encoder(typ); codec.UsesWeights {
			w = t.weights
		}
		if err := quant.QuantizeRows(typ, q, x, rowLen, w, 1); err != nil {
			return fmt.Errorf("tensor %q: %w", t.src.Name, err)
		}
		if err := quant.DequantizeRows(typ, y, q, 1); err != nil {
			return fmt.Errorf("tensor %q: %w", t.src.Name, err)
		}
		slot[k] = sqErr(x, y, t.colW, rowLen)
	}
	slot[len(t.types)] = sqErr(x, nil, t.colW, rowLen)
	return nil
}

// sqErr returns Σ w[j]·(x−y)² over rows of rowLen (y nil: Σ w[j]·x²; w
// nil: weights of one), accumulated per row in float64.
func sqErr(x, y, w []float32, rowLen int) float64 {
	var total float64
	for r := 0; r < len(x); r += rowLen {
		var acc float64
		for j := range rowLen {
			d := float64(x[r+j])
			if y != nil {
				d -= float64(y[r+j])
			}
			if w != nil {
				acc += float64(w[j]) * d * d
			} else {
				acc += d * d
			}
		}
		total += acc
	}
	return total
}

// importance returns the imatrix vector the real run would give a tensor
// (its own name, then sd.cpp's name for it), or nil.
func (b *builder) importance(name string, rowLen int64) []float32 {
	if b.imp == nil {
		return nil
	}
	v, ok, err := b.imp.Vector(name, rowLen)
	if !ok && b.imatrixKey != nil {
		if k := b.imatrixKey(name); k != name {
			v, ok, err = b.imp.Vector(k, rowLen)
		}
	}
	if !ok || err != nil {
		return nil
	}
	return v
}

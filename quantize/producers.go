package quantize

import (
	"context"
	"fmt"
	"sync"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/convrot"
	"github.com/sdtool/sdtool/quantize/dequant"
)

// rowEncoder encodes whole rows of floats (rowLen each) into dst; firstRow
// is the index of the first row in the output tensor. It may overwrite src.
type rowEncoder func(dst []byte, src []float32, rowLen int, firstRow int64) error

// floatProducer reads the elements of an output's rows from a source
// through package dequant (any stored type, any reshape of the same
// element order) and encodes them.
type floatProducer struct {
	src    *dequant.Source
	encode rowEncoder
	rowLen int64
}

// Prepare checks the element count and returns the scratch one row needs:
// its floats, its raw source bytes and an unaligned-range buffer.
func (p *floatProducer) Prepare(o *pipeline.Output) (int64, error) {
	if err := p.src.Err(); err != nil {
		return 0, err
	}
	n := o.Elements()
	if n != p.src.Elements() {
		return 0, fmt.Errorf("tensor %q: output shape %v has %d elements, source %q has %d", o.Name, o.Shape, n, p.src.Name, p.src.Elements())
	}
	rows, _, err := o.Rows()
	if err != nil {
		return 0, err
	}
	if rows == 0 {
		return 0, nil
	}
	p.rowLen = n / rows
	return 8*p.rowLen + p.src.RawBytes(p.rowLen), nil
}

// Produce decodes and encodes rows [firstRow, firstRow+nRows).
func (p *floatProducer) Produce(_ context.Context, dst []byte, firstRow, nRows int64, s *pipeline.Scratch) error {
	if nRows <= 0 {
		return nil
	}
	if p.rowLen == 0 {
		return fmt.Errorf("tensor %q: producer used before Prepare", p.src.Name)
	}
	f := s.Float32s(0, int(nRows*p.rowLen))
	if err := p.src.Read(f, firstRow*p.rowLen, s); err != nil {
		return err
	}
	return p.encode(dst, f, int(p.rowLen), firstRow)
}

// ggmlEncoder encodes rows with a registered codec (quant.Codec.Quantize)
// and an importance vector (nil: ggml's unweighted path).
func ggmlEncoder(t formats.DType, quantize func(dst []byte, src, weights []float32), weights []float32) rowEncoder {
	enc := pipeline.EncodeWith(t, quantize, weights)
	return func(dst []byte, src []float32, rowLen int, _ int64) error { return enc(dst, src, rowLen) }
}

// constant produces fixed bytes (a comfy_quant marker, a tensor-wise scale):
// rows of a constant output are slices of b.
func constant(b []byte) pipeline.Producer {
	return pipeline.ProducerFunc(func(_ context.Context, dst []byte, first, n int64, _ *pipeline.Scratch) error {
		if n <= 0 {
			return nil
		}
		rb := int64(len(dst)) / n
		if (first+n)*rb > int64(len(b)) {
			return fmt.Errorf("constant of %d bytes: rows [%d, %d) of %d bytes out of range", len(b), first, first+n, rb)
		}
		copy(dst, b[first*rb:])
		return nil
	})
}

// amaxOnce computes the largest magnitude of a whole source once, streamed
// in bounded chunks, for the tensor-wise FP8 scale; every producer of the
// module waits for the same result.
type amaxOnce struct {
	src  *dequant.Source
	t    formats.DType
	once sync.Once
	fp8  convrot.FP8
	err  error
}

// chunkElements bounds the floats read at once by amaxOnce.
const chunkElements = 1 << 20

func (a *amaxOnce) get() (convrot.FP8, error) {
	a.once.Do(func() {
		var s pipeline.Scratch
		total := a.src.Elements()
		var amax float32
		for first := int64(0); first < total; first += chunkElements {
			n := min(chunkElements, total-first)
			f := s.Float32s(0, int(n))
			if a.err = a.src.Read(f, first, &s); a.err != nil {
				return
			}
			m, err := convrot.AbsMax(f)
			if err != nil {
				a.err = fmt.Errorf("tensor %q: %w", a.src.Name, err)
				return
			}
			amax = max(amax, m)
		}
		a.fp8, a.err = convrot.NewFP8(a.t, amax)
	})
	return a.fp8, a.err
}

// convrotOutputs returns the three outputs of one ComfyUI module (weight,
// weight_scale, comfy_quant) with their producers.
func convrotOutputs(p convrot.Layer, src *dequant.Source) ([]pipeline.Output, error) {
	weight := &floatProducer{src: src}
	var scale pipeline.Producer
	switch p.Config.Format {
	case comfyquant.FormatInt8:
		q, err := p.Rows()
		if err != nil {
			return nil, err
		}
		weight.encode = func(dst []byte, rows []float32, _ int, _ int64) error { return q.Quantize(dst, nil, rows) }
		// The scale output has rows of one element; read whole weight rows for it.
		scale = &scaleProducer{src: src, in: p.Source.Shape[1], q: q}
	default:
		a := &amaxOnce{src: src, t: p.Weight.Type}
		weight.encode = func(dst []byte, rows []float32, _ int, _ int64) error {
			f, err := a.get()
			if err != nil {
				return err
			}
			return f.Encode(dst, rows)
		}
		scale = pipeline.ProducerFunc(func(_ context.Context, dst []byte, _, _ int64, _ *pipeline.Scratch) error {
			f, err := a.get()
			if err != nil {
				return err
			}
			copy(dst, convrot.PutScales(nil, []float32{f.Scale}))
			return nil
		})
	}
	st := src.Tensor
	return []pipeline.Output{
		{Name: p.Weight.Name, Type: p.Weight.Type, Shape: p.Weight.Shape, Producer: weight, Source: &st},
		{Name: p.Scale.Name, Type: p.Scale.Type, Shape: p.Scale.Shape, Producer: scale},
		{Name: p.Marker.Name, Type: p.Marker.Type, Shape: p.Marker.Shape, Producer: constant(p.MarkerData)},
	}, nil
}

// scaleProducer writes the per-row INT8 scales of a weight: output row r
// (one F32) comes from weight row r.
type scaleProducer struct {
	src *dequant.Source
	in  int64
	q   convrot.Int8Rows
}

// Prepare returns the scratch of one weight row.
func (p *scaleProducer) Prepare(o *pipeline.Output) (int64, error) {
	if err := p.src.Err(); err != nil {
		return 0, err
	}
	return 8*p.in + p.src.RawBytes(p.in), nil
}

// Produce reads nRows weight rows and writes their scales.
func (p *scaleProducer) Produce(_ context.Context, dst []byte, firstRow, nRows int64, s *pipeline.Scratch) error {
	if nRows <= 0 {
		return nil
	}
	f := s.Float32s(0, int(nRows*p.in))
	if err := p.src.Read(f, firstRow*p.in, s); err != nil {
		return err
	}
	return p.q.ScaleBytes(dst, f)
}

package quantize

import (
	"context"
	"fmt"
	"sync"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// amaxOnce computes the largest magnitude of a whole source once, streamed
// in bounded chunks, for the tensor-wise FP8 scale; every producer of the
// module waits for the same result.
type amaxOnce struct {
	src  *tensor.Source
	t    formats.DType
	once sync.Once
	fp8  convrot.FP8
	err  error
}

// chunkElements bounds the floats read at once by amaxOnce.
const chunkElements = 1 << 20

func (a *amaxOnce) get() (convrot.FP8, error) {
	a.once.Do(func() {
		var s tensor.Scratch
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
func convrotOutputs(p convrot.Layer, src *tensor.Source) ([]pipeline.Output, error) {
	var weight, scale pipeline.Producer
	switch p.Config.Format {
	case comfyquant.FormatInt8:
		q, err := p.Rows()
		if err != nil {
			return nil, err
		}
		// The weight keeps its rows' scales for the scale output, which
		// the pipeline writes after it: the weight is decoded once.
		w := &int8Weight{src: src, q: q}
		weight, scale = w, int8Scale{w}
	default:
		a := &amaxOnce{src: src, t: p.Weight.Type}
		weight = pipeline.Convert(src, p.Weight.Type, func(dst []byte, rows []float32, _ int) error {
			f, err := a.get()
			if err != nil {
				return err
			}
			return f.Encode(dst, rows)
		})
		scale = pipeline.ProducerFunc(func(_ context.Context, dst []byte, _, _ int64, _ *tensor.Scratch) error {
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
		{Name: p.Marker.Name, Type: p.Marker.Type, Shape: p.Marker.Shape, Producer: pipeline.Constant(p.MarkerData)},
	}, nil
}

// blockModule encodes a whole nvfp4, mxfp8, convrot_w4a4 or
// asym_w4a8_int8 layer once, when its first output is produced, and hands
// each output its bytes. The formats need the whole layer (a tensor scale,
// a codebook, scales swizzled across rows), so one layer's floats and codes
// are in memory at a time per worker; each output's bytes are dropped once
// all of them are written.
type blockModule struct {
	src     *tensor.Source
	layer   convrot.Layer
	weights []float32 // importance per input column, or nil
	once    sync.Once
	err     error
	mu      sync.Mutex
	bufs    [][]byte
	left    []int64 // bytes of each output not yet produced
}

// encode reads and encodes the layer.
func (b *blockModule) encode() error {
	b.once.Do(func() {
		var s tensor.Scratch
		f := make([]float32, b.src.Elements())
		if b.err = b.src.Read(f, 0, &s); b.err != nil {
			return
		}
		b.bufs, b.err = b.layer.EncodeBlock(f, b.weights)
		b.left = make([]int64, len(b.bufs))
		for i, buf := range b.bufs {
			b.left[i] = int64(len(buf))
		}
	})
	return b.err
}

// producer returns the producer of output i (Layout.Tensors order).
func (b *blockModule) producer(i int) pipeline.Producer {
	return pipeline.ProducerFunc(func(_ context.Context, dst []byte, firstRow, nRows int64, _ *tensor.Scratch) error {
		if nRows <= 0 {
			return nil
		}
		if err := b.encode(); err != nil {
			return err
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		buf := b.bufs[i]
		rowBytes := int64(len(dst)) / nRows
		if buf == nil || (firstRow+nRows)*rowBytes > int64(len(buf)) {
			return fmt.Errorf("tensor %q: output %d rows [%d, %d) beyond the %d encoded bytes", b.src.Name, i, firstRow, firstRow+nRows, len(buf))
		}
		copy(dst, buf[firstRow*rowBytes:])
		if b.left[i] -= int64(len(dst)); b.left[i] == 0 {
			b.bufs[i] = nil
		}
		return nil
	})
}

// blockOutputs returns the outputs of one nvfp4, mxfp8, convrot_w4a4 or
// asym_w4a8_int8 module: its weight and scale tensors, then comfy_quant.
func blockOutputs(p convrot.Layer, src *tensor.Source, weights []float32) []pipeline.Output {
	b := &blockModule{src: src, layer: p, weights: weights}
	st := src.Tensor
	var outs []pipeline.Output
	ts := p.Tensors()
	for i, t := range ts[:len(ts)-1] {
		o := pipeline.Output{Name: t.Name, Type: t.Type, Shape: t.Shape, Producer: b.producer(i)}
		if i == 0 {
			o.Source = &st
		}
		outs = append(outs, o)
	}
	return append(outs, pipeline.Output{Name: p.Marker.Name, Type: p.Marker.Type, Shape: p.Marker.Shape, Producer: pipeline.Constant(p.MarkerData)})
}

// blockWeights returns the importance weights of a layer for the types
// that use them (nil otherwise, or when the imatrix has no entry), and a
// note prefix for the plan.
func (b *builder) blockWeights(s *tensor.Source, t convrot.Type) ([]float32, string, error) {
	if b.imp == nil || !convrot.UsesImportance(t) {
		return nil, "", nil
	}
	in := s.Shape()[len(s.Shape())-1]
	v, ok, err := b.imp.Vector(s.Name, in)
	if !ok && err == nil && b.imatrixKey != nil {
		if k := b.imatrixKey(s.Name); k != s.Name {
			v, ok, err = b.imp.Vector(k, in)
		}
	}
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("%s: tensor %q: %v", b.opts.Input, s.Name, err)
	case !ok:
		b.res.ImatrixMissing = append(b.res.ImatrixMissing, s.Name)
		return nil, "", nil
	}
	return v, "imatrix; ", nil
}

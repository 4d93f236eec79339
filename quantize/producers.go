package quantize

import (
	"context"
	"fmt"
	"sync"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/convrot"
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

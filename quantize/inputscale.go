package quantize

import (
	"fmt"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// inputScale returns the <module>.input_scale output of a layer of type t
// calibrated from the imatrix's activation maximum (the largest |x| that
// generate --imatrix-out saw entering the layer, over the range of t's
// activation codes: what ComfyUI computes on each call without one), and
// the note for the plan. ok is false when t takes no input_scale or the
// imatrix records no maximum for the layer.
func (b *builder) inputScale(s *tensor.Source, p convrot.Layer, t convrot.Type) (out pipeline.Output, note string, ok bool) {
	r, takes := convrot.InputScaleRange(t)
	if !takes || b.imp == nil {
		return out, "", false
	}
	amax, ok := b.imp.InputMax(s.Name)
	if !ok && b.imatrixKey != nil {
		amax, ok = b.imp.InputMax(b.imatrixKey(s.Name))
	}
	if !ok || amax <= 0 {
		// A layer never run (or only ever fed zeros) has nothing to calibrate.
		return out, "", false
	}
	b.res.inputScales++
	scale := float32(float64(amax) / r)
	out = pipeline.Output{Name: p.Module + ".input_scale", Type: formats.F32, Shape: []int64{},
		Producer: pipeline.Constant(convrot.PutScales(nil, []float32{scale})), Note: "part of module " + p.Module}
	return out, fmt.Sprintf("; input_scale %.4g (activation max %.4g / %g)", scale, amax, r), true
}

// takesInputScale reports the types --imatrix calibrates input_scale for
// without using importance weights (fp8).
func takesInputScale(t convrot.Type) bool {
	_, ok := convrot.InputScaleRange(t)
	return ok && !convrot.UsesImportance(t)
}

package flux

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// DiTInputs are the graph inputs that Flux's DiT and the DiTs built like it
// (Flux.2, Qwen-Image, Z-Image, Wan) read: the image tokens, the text
// tokens, the timestep, and the rotary table's cos and sin per position.
type DiTInputs struct {
	Img, Txt, T, Cos, Sin native.Tensor
}

// NewDiTInputs makes the inputs of one evaluation in: image tokens of imgDim
// values each holding img, in's text tokens and timestep, and a rotary
// table of half values per position (cos, sin); it returns them with the
// values to fill them with.
func NewDiTInputs(g *infer.Builder, in *infer.NetInput, img []float32, imgDim int, cos, sin []float32, half int) (DiTInputs, []infer.Input) {
	if imgDim <= 0 || half <= 0 || len(img)%imgDim != 0 || len(cos)%half != 0 || len(sin) != len(cos) {
		panic(&native.ShapeError{Msg: fmt.Sprintf("DiT inputs: %d image values in tokens of %d, rotary tables of %d and %d values in rows of %d",
			len(img), imgDim, len(cos), len(sin), half)})
	}
	c := in.Cond
	d := DiTInputs{
		Img: infer.NewInput(g, formats.F32, int64(imgDim), int64(len(img)/imgDim)),
		Txt: infer.NewInput(g, formats.F32, int64(c.Dim), int64(c.Tokens)),
		T:   infer.NewInput(g, formats.F32, 1),
		Cos: infer.NewInput(g, formats.F32, int64(half), int64(len(cos)/half)),
		Sin: infer.NewInput(g, formats.F32, int64(half), int64(len(sin)/half)),
	}
	return d, []infer.Input{
		{T: d.Img, F32: img}, {T: d.Txt, F32: c.Context}, {T: d.T, F32: []float32{in.T}}, {T: d.Cos, F32: cos}, {T: d.Sin, F32: sin},
	}
}

package convrot_test

import (
	"fmt"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
)

// A writer lays out a layer, then streams its rows through Int8Rows.
func Example() {
	w := formats.Tensor{Name: "blocks.0.attn.to_q.weight", Type: formats.F16, Shape: []int64{2, 8}}
	p, err := convrot.NewLayer(w, convrot.Options{Type: convrot.Int8Convrot, GroupSize: 4})
	if err != nil {
		panic(err)
	}
	for _, t := range p.Tensors() {
		fmt.Println(t.Name, t.Type, t.Shape)
	}
	fmt.Printf("%s\n", p.MarkerData)

	q, _ := p.Rows()
	rows := []float32{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0}
	codes := make([]byte, 16)
	scales := make([]float32, 2)
	if err := q.Quantize(codes, scales, rows); err != nil {
		panic(err)
	}
	fmt.Println(scales[1] == convrot.MinScale)
	// Output:
	// blocks.0.attn.to_q.weight i8 [2 8]
	// blocks.0.attn.to_q.weight_scale f32 [2 1]
	// blocks.0.attn.to_q.comfy_quant u8 [70]
	// {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 4}
	// true
}

package convrot_test

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant/convrot"
)

// A writer plans a module, then streams its rows through Int8Rows.
func Example() {
	w := formats.Tensor{Name: "blocks.0.attn.to_q.weight", Type: formats.F16, Shape: []int64{2, 8}}
	p, err := convrot.PlanModule(w, convrot.Options{Type: convrot.Int8Convrot, GroupSize: 4})
	if err != nil {
		panic(err)
	}
	for _, t := range p.Outputs() {
		fmt.Println(t.Name, t.Type, t.Shape)
	}
	fmt.Printf("%s\n", p.Marker)

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

// The marker parser accepts what ComfyUI writes and refuses group sizes the
// kitchen refuses.
func ExampleParseQuantConfig() {
	c, err := convrot.ParseQuantConfig([]byte(`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`))
	fmt.Println(c.Format, c.Convrot, c.GroupSize, err)
	_, err = convrot.ParseQuantConfig([]byte(`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 512}`))
	fmt.Println(err)
	// Output:
	// int8_tensorwise true 256 <nil>
	// invalid comfy_quant marker: convrot_groupsize: invalid convrot group size: 512 is a power of two but not of four (ComfyUI accepts 4, 16, 64, 256, 1024, ...)
}

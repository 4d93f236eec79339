package comfyquant_test

import (
	"fmt"

	"github.com/sdtool/sdtool/formats/comfyquant"
)

// The marker parser accepts what ComfyUI writes and refuses group sizes the
// kitchen refuses.
func ExampleParseQuantConfig() {
	c, err := comfyquant.ParseQuantConfig([]byte(`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`))
	fmt.Println(c.Format, c.Convrot, c.GroupSize, err)
	_, err = comfyquant.ParseQuantConfig([]byte(`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 512}`))
	fmt.Println(err)
	// Output:
	// int8_tensorwise true 256 <nil>
	// comfyquant: invalid comfy_quant marker: convrot_groupsize: group size 512 is a power of two but not of four (ComfyUI accepts 4, 16, 64, 256, 1024, ...)
}

// A writer lays out one module: three tensors and the marker's bytes.
func ExampleNewLayout() {
	l, err := comfyquant.NewLayout("blocks.0.attn.to_q", 2, 8, comfyquant.QuantConfig{Format: comfyquant.FormatInt8, Convrot: true, GroupSize: 4})
	if err != nil {
		panic(err)
	}
	for _, t := range l.Tensors() {
		fmt.Println(t.Name, t.Type, t.Shape, t.Size)
	}
	fmt.Printf("%s\n", l.MarkerData)
	// Output:
	// blocks.0.attn.to_q.weight i8 [2 8] 16
	// blocks.0.attn.to_q.weight_scale f32 [2 1] 8
	// blocks.0.attn.to_q.comfy_quant u8 [70] 70
	// {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 4}
}

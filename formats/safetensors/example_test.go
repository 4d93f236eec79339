package safetensors_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/safetensors"
)

// Example writes a small file with the streaming writer and reads it back.
func Example() {
	tensors := []formats.Tensor{
		{Name: "proj.weight", Type: formats.F16, Shape: []int64{2, 2}},
		{Name: "proj.bias", Type: formats.F32, Shape: []int64{2}},
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, tensors, map[string]string{"format": "pt"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	// Data goes in header order; sizes follow from type and shape.
	w.Write([]byte{0, 0x3c, 0, 0x40, 0, 0x42, 0, 0x44}) // f16 1, 2, 3, 4
	w.Write([]byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40})    // f32 1, 2
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	f, err := safetensors.Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "example.safetensors")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("data starts at", f.Info().DataOffset)
	for _, t := range f.Tensors() {
		fmt.Println(t.Name, t.Type, t.Shape, t.Size, "bytes")
	}
	format, _ := f.Metadata().String("format")
	fmt.Println("format:", format)
	// Output:
	// data starts at 168
	// proj.weight f16 [2 2] 8 bytes
	// proj.bias f32 [2] 8 bytes
	// format: pt
}

// ExampleParse shows the error for a header whose offsets are reversed.
func ExampleParse() {
	header := `{"x.weight":{"dtype":"U8","shape":[2],"data_offsets":[10,8]}}`
	file := append([]byte{byte(len(header)), 0, 0, 0, 0, 0, 0, 0}, header...)
	file = append(file, make([]byte, 10)...)
	_, err := safetensors.Parse(bytes.NewReader(file), int64(len(file)), "model.safetensors")
	fmt.Println(err)
	// Output:
	// model.safetensors: tensor "x.weight": data_offsets [10, 8) are reversed
}

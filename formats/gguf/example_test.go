package gguf_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// Write a small GGUF into memory and read it back.
func Example() {
	tensors := []formats.Tensor{
		{Name: "proj.weight", Type: formats.Q8_0, Shape: []int64{2, 32}}, // 2 rows of 1 block
		{Name: "proj.bias", Type: formats.F32, Shape: []int64{2}},
	}
	meta := formats.Metadata{
		{Key: "general.architecture", Type: formats.TypeString, Value: "example"},
	}
	var buf bytes.Buffer
	w, err := gguf.NewWriter(&buf, tensors, meta, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range w.Layout() {
		if _, err := w.Write(make([]byte, t.Size)); err != nil { // the tensor's data
			log.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	f, err := gguf.Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "example.gguf")
	if err != nil {
		log.Fatal(err)
	}
	arch, _ := f.Metadata().String("general.architecture")
	fmt.Println("architecture:", arch, "packed:", f.Packed())
	for _, t := range f.Tensors() {
		fmt.Printf("%s %s %v at %d, %d bytes\n", t.Name, t.Type, t.Shape, t.Offset, t.Size)
	}
	// Output:
	// architecture: example packed: true
	// proj.weight q8_0 [2 32] at 192, 68 bytes
	// proj.bias f32 [2] at 288, 8 bytes
}

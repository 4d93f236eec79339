package pipeline_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/sdtool/sdtool/formats"
	_ "github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// A plan that writes one generated tensor to a GGUF file; a real command
// builds its outputs from an opened model with pipeline.Copy or
// pipeline.Convert, and a context that Ctrl-C cancels.
func Example() {
	ones := pipeline.ProducerFunc(func(_ context.Context, dst []byte, _, _ int64, _ *tensor.Scratch) error {
		for i := 0; i < len(dst); i += 4 {
			copy(dst[i:], []byte{0, 0, 0x80, 0x3f}) // 1.0f
		}
		return nil
	})
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "out.gguf")
	format, err := formats.CreatorFor(out)
	if err != nil {
		log.Fatal(err)
	}
	plan := &pipeline.Plan{Path: out, Format: format, Outputs: []pipeline.Output{
		{Name: "scale", Type: formats.F32, Shape: []int64{4, 8}, Producer: ones},
	}}
	s, err := plan.Summary()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d tensor, %d bytes, %.0f bits per weight\n", len(s.Tensors), s.Bytes, s.BitsPerWeight)
	if err := pipeline.Run(context.Background(), plan, pipeline.Options{}); err != nil {
		log.Fatal(err)
	}
	st, _ := os.Stat(out)
	fmt.Println("wrote", st.Size(), "bytes")
	// Output:
	// 1 tensor, 128 bytes, 32 bits per weight
	// wrote 224 bytes
}

package quantize_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/inspect"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quantize"
)

// Quantize the tiny SD1 model to Q8_0 and compare the result with its
// source.
func ExamplePlan() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "tiny-q8_0.gguf")
	plan, rep, err := quantize.Plan(&quantize.Options{
		Input: "../testdata/tiny-sd1.safetensors", Output: out, Type: "Q8_0",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer plan.Close()
	if err := pipeline.Run(context.Background(), plan, pipeline.Options{}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rep.Format, rep.FType.Name, rep.ComfyArch, len(plan.Outputs))

	a, _ := formats.Open("../testdata/tiny-sd1.safetensors")
	defer a.Close()
	b, _ := formats.Open(out)
	defer b.Close()
	d, _ := inspect.Diff(a, b, inspect.DiffOptions{})
	fmt.Printf("%d compared, %d identical, cosine > 0.9999: %v\n", d.Totals.Compared, d.Totals.Identical, *d.Totals.Cosine > 0.9999)
	// Output:
	// gguf Q8_0 sd1 958
	// 958 compared, 764 identical, cosine > 0.9999: true
}

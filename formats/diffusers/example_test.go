package diffusers_test

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/diffusers"
	"github.com/sdtool/sdtool/formats/safetensors"
)

// Example opens a folder with a UNet and a text encoder through
// formats.Open and lists the prefixed names.
func Example() {
	dir, err := os.MkdirTemp("", "sd15")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	write := func(rel string, names ...string) {
		var ts []formats.Tensor
		for _, n := range names {
			ts = append(ts, formats.Tensor{Name: n, Type: formats.F16, Shape: []int64{2}})
		}
		var buf bytes.Buffer
		w, _ := safetensors.NewWriter(&buf, ts, nil, nil)
		w.Write(make([]byte, 4*len(ts)))
		w.Close()
		os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755)
		os.WriteFile(filepath.Join(dir, rel), buf.Bytes(), 0o644)
	}
	write("unet/diffusion_pytorch_model.safetensors", "conv_in.weight", "conv_in.bias")
	write("text_encoder/model.safetensors", "text_model.embeddings.position_ids")
	os.WriteFile(filepath.Join(dir, diffusers.IndexFile), []byte(`{"_class_name": "StableDiffusionPipeline"}`), 0o644)

	m, err := formats.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	for _, t := range m.Tensors() {
		fmt.Println(t.Name, t.Type, t.Shape)
	}
	fmt.Println(len(m.Info().Warnings), "warning (no vae)")
	// Output:
	// unet.conv_in.weight f16 [2]
	// unet.conv_in.bias f16 [2]
	// te.text_model.embeddings.position_ids f16 [2]
	// 1 warning (no vae)
}

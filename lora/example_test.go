package lora_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/lora"
	"github.com/sdtool/sdtool/quant"
)

// writeF32 writes a safetensors file of float32 tensors, every value v.
func writeF32(path string, tensors []formats.Tensor, v float32) {
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, tensors, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range tensors {
		n, _ := formats.Elements(t.Shape)
		b := make([]byte, 4*n)
		for i := int64(0); i < n; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		w.Write(b)
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}

// Example bakes a diffusers-style Flux LoRA (separate to_q, to_k, to_v) into
// a BFL Flux file that stores them fused as qkv, streaming the base tensor
// in chunks of rows the way a writer would.
func Example() {
	dir, _ := os.MkdirTemp("", "lora-example")
	defer os.RemoveAll(dir)
	basePath, loraPath := filepath.Join(dir, "flux.safetensors"), filepath.Join(dir, "style.safetensors")
	writeF32(basePath, []formats.Tensor{
		{Name: "double_blocks.0.img_attn.qkv.weight", Type: formats.F32, Shape: []int64{6, 2}},
		{Name: "double_blocks.0.img_attn.proj.weight", Type: formats.F32, Shape: []int64{2, 2}},
		{Name: "single_blocks.0.linear2.weight", Type: formats.F32, Shape: []int64{2, 2}},
	}, 1)
	var adapter []formats.Tensor
	for _, m := range []string{"to_q", "to_k", "to_v"} {
		p := "transformer.transformer_blocks.0.attn." + m
		adapter = append(adapter,
			formats.Tensor{Name: p + ".lora_A.weight", Type: formats.F32, Shape: []int64{1, 2}},
			formats.Tensor{Name: p + ".lora_B.weight", Type: formats.F32, Shape: []int64{2, 1}})
	}
	writeF32(loraPath, adapter, 0.5) // every delta element is 0.5·0.5 = 0.25

	base, err := formats.Open(basePath)
	if err != nil {
		log.Fatal(err)
	}
	defer base.Close()
	a, err := lora.Open(loraPath)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	v, prefix := lora.DetectBase(base.Tensors())
	b, err := lora.NewBase(base.Tensors(), v, prefix)
	if err != nil {
		log.Fatal(err)
	}
	plan, err := b.Match(lora.Use{Adapter: a, Strength: 2})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v, prefix, len(plan.Unmatched), "unmatched")
	for _, t := range base.Tensors() {
		tg := plan.Target(t.Name)
		if tg == nil {
			fmt.Println(t.Name, "unchanged")
			continue
		}
		// Two rows at a time: read, decode, add, (quantize and write).
		raw := make([]byte, 2*t.RowLength()*4)
		rows := make([]float32, 2*t.RowLength())
		for r := int64(0); r < tg.Rows; r += 2 {
			if err := formats.ReadRows(base, &t, r, 2, raw); err != nil {
				log.Fatal(err)
			}
			quant.DecodeFloats(t.Type, rows, raw)
			if err := tg.AddTo(rows, r*tg.RowElems); err != nil {
				log.Fatal(err)
			}
			fmt.Println(t.Name, "rows", r, r+1, rows)
		}
		tg.Release()
	}
	// Output:
	// flux model.diffusion_model. 0 unmatched
	// double_blocks.0.img_attn.qkv.weight rows 0 1 [1.5 1.5 1.5 1.5]
	// double_blocks.0.img_attn.qkv.weight rows 2 3 [1.5 1.5 1.5 1.5]
	// double_blocks.0.img_attn.qkv.weight rows 4 5 [1.5 1.5 1.5 1.5]
	// double_blocks.0.img_attn.proj.weight unchanged
	// single_blocks.0.linear2.weight unchanged
}

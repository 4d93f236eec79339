package gguf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// BenchmarkOpenLarge parses the header of a sparse 10 GB GGUF with a few
// hundred tensor infos and some metadata, reporting the bytes read.
func BenchmarkOpenLarge(b *testing.B) {
	var ts []formats.Tensor
	for i := range 300 {
		ts = append(ts, formats.Tensor{Name: fmt.Sprintf("model.diffusion_model.blocks.%d.attn.weight", i), Type: formats.F16, Shape: []int64{4096, 4096}})
	}
	for i := range 100 {
		ts = append(ts, formats.Tensor{Name: fmt.Sprintf("model.diffusion_model.blocks.%d.norm.weight", i), Type: formats.F32, Shape: []int64{4096}})
	}
	meta := formats.Metadata{
		{Key: "general.architecture", Type: formats.TypeString, Value: "flux"},
		{Key: "general.file_type", Type: formats.TypeUint32, Value: uint32(1)},
		{Key: "tokenizer.ids", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: make([]int32, 50000)}},
	}
	w, err := NewWriter(nil, ts, meta, nil)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "large.gguf")
	fh, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write(w.Header()); err != nil {
		b.Fatal(err)
	}
	if err := fh.Truncate(w.Size()); err != nil {
		b.Fatal(err)
	}
	cr := &countingReaderAt{r: fh}
	b.ResetTimer()
	for b.Loop() {
		f, err := Parse(cr, w.Size(), path)
		if err != nil {
			b.Fatal(err)
		}
		if len(f.Tensors()) != len(ts) {
			b.Fatal("tensor count")
		}
	}
	b.ReportMetric(float64(cr.n.Load())/float64(b.N), "bytes-read/op")
	b.ReportMetric(float64(len(w.Header())), "header-bytes")
	b.ReportMetric(float64(w.Size())/1e9, "file-GB")
}

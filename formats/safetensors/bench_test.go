package safetensors

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// BenchmarkOpenLarge opens a sparse 10 GiB checkpoint (320 f16 tensors of
// 4096x4096) and lists its tensors; bytes-read/op shows that only the
// length and header are read, whatever the file size.
func BenchmarkOpenLarge(b *testing.B) {
	const n = 320
	tensors := make([]formats.Tensor, n)
	for i := range tensors {
		tensors[i] = formats.Tensor{
			Name:  fmt.Sprintf("model.diffusion_model.transformer_blocks.%d.attn.to_q.weight", i),
			Type:  formats.F16,
			Shape: []int64{4096, 4096},
		}
	}
	w, err := NewWriter(nil, tensors, map[string]string{"format": "pt"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "large.safetensors")
	if err := os.WriteFile(path, w.HeaderBytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	// Truncate extends the file with a hole: 10 GiB that take no disk space.
	if err := os.Truncate(path, w.Size()); err != nil {
		b.Fatal(err)
	}

	var read int64
	b.ReportAllocs()
	for b.Loop() {
		osf, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		st, err := osf.Stat()
		if err != nil {
			b.Fatal(err)
		}
		cr := &countingReaderAt{r: osf}
		f, err := Parse(cr, st.Size(), path)
		if err != nil {
			b.Fatal(err)
		}
		var total int64
		for _, t := range f.Tensors() {
			total += t.Size
		}
		if len(f.Tensors()) != n || total != w.Size()-w.DataOffset() {
			b.Fatalf("%d tensors, %d bytes", len(f.Tensors()), total)
		}
		osf.Close()
		read += cr.bytes.Load()
	}
	b.ReportMetric(float64(read)/float64(b.N), "bytes-read/op")
	b.ReportMetric(float64(w.Size())/(1<<30), "file-GiB")
}

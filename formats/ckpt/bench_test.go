package ckpt

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkOpenSD opens a zip checkpoint shaped like an SD 1.x state dict
// (1,200 tensors, each with its own storage record, names of SD length);
// the data is tiny, so the time is the pickle and the zip directory.
func BenchmarkOpenSD(b *testing.B) {
	const n = 1200
	ts := make([]tspec, n)
	for i := range ts {
		ts[i] = tspec{
			name:  fmt.Sprintf("model.diffusion_model.output_blocks.%d.1.transformer_blocks.0.attn%d.to_q.weight", i/10, i%10),
			class: "HalfStorage", key: fmt.Sprint(i), numel: 4, size: []int64{2, 2},
		}
	}
	data, _ := storagesFor(ts)
	pkl := wrapped(ts, false)
	p := filepath.Join(b.TempDir(), "sd.ckpt")
	if err := os.WriteFile(p, buildZip(b, "archive", pkl, data), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(pkl)), "pickle-bytes")
	b.ResetTimer()
	for b.Loop() {
		f, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		if len(f.Tensors()) != n {
			b.Fatal(len(f.Tensors()))
		}
		f.Close()
	}
}

//go:build cgo

package refcache

import (
	"bytes"
	"compress/flate"
	"testing"

	_ "github.com/sdtool/sdtool/formats/gguf" // the tiny model's format
	"github.com/sdtool/sdtool/infer"
)

// BenchmarkEntryCompression measures how far DEFLATE (fastest and best
// levels; LZ4 compresses less than either) shrinks a real entry: a tiny
// SD 1.x render at 64x64 with its block outputs. The float mantissas are
// noise, so an entry is kept uncompressed unless this ratio says otherwise.
func BenchmarkEntryCompression(b *testing.B) {
	m, err := infer.Load(infer.Components{"model": "../../../../testdata/tiny-sd1.gguf"}, infer.LoadOptions{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 1, Seed: 1, CaptureBlocks: true})
	if err != nil {
		b.Fatal(err)
	}
	data := encode(res)
	deflate := func(level int) int {
		var out bytes.Buffer
		w, _ := flate.NewWriter(&out, level)
		w.Write(data)
		w.Close()
		return out.Len()
	}
	best := deflate(flate.BestCompression)
	var fast int
	for b.Loop() {
		fast = deflate(flate.BestSpeed)
	}
	b.ReportMetric(float64(fast)/float64(len(data)), "size-ratio-fast")
	b.ReportMetric(float64(best)/float64(len(data)), "size-ratio-best")
	b.ReportMetric(float64(len(data)), "entry-bytes")
}

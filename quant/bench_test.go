package quant

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
)

// ggmlQuantize is ggml's quantizer for the ggml half of BenchmarkQuantize.
// It is set by bench_cgo_test.go in a cgo build and nil otherwise. dst is
// exactly the encoded size.
var ggmlQuantize func(t formats.DType, dst []byte, src []float32, nPerRow int, weights []float32) error

// benchRows returns the rows every quantize benchmark encodes: 16 Gaussian
// rows with outliers of 4096 floats (256 KiB of f32).
func benchRows() (src []float32, nPerRow int, weights []float32) {
	const n, rows = 4096, 16
	r := rand.New(rand.NewPCG(harnessSeed, 7))
	src = make([]float32, n*rows)
	gaussRow(r, src)
	weights = make([]float32, n)
	for i := range weights {
		weights[i] = float32(0.1 + r.Float64()*r.Float64()*10)
	}
	return src, n, weights
}

// BenchmarkQuantize encodes the same rows with the Go codec and, in a cgo
// build, with ggml, single-threaded, for every type that has a Go quantizer
// and both paths ("ref": no importance weights; "imatrix": a random vector).
// The "ratio" sub-benchmark alternates the two and reports Go's time over
// ggml's (below 1: Go is faster).
func BenchmarkQuantize(b *testing.B) {
	src, n, w := benchRows()
	for _, t := range Registered() {
		c, _ := Lookup(t)
		if c.Quantize == nil || c.Native {
			continue
		}
		rb, err := t.RowBytes(int64(n))
		if err != nil {
			continue
		}
		dst := make([]byte, int(rb)*(len(src)/n))
		for _, path := range []string{"ref", "imatrix"} {
			weights := w
			if path == "ref" {
				if c.NeedsWeights {
					continue
				}
				weights = nil
			}
			b.Run(t.String()+"/"+path+"/go", func(b *testing.B) {
				b.SetBytes(int64(len(src) * 4))
				b.ReportAllocs()
				for b.Loop() {
					if err := QuantizeRows(t, dst, src, n, weights, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
			if ggmlQuantize == nil {
				continue
			}
			b.Run(t.String()+"/"+path+"/ggml", func(b *testing.B) {
				if err := ggmlQuantize(t, dst, src, n, weights); err != nil {
					b.Skip(err)
				}
				b.SetBytes(int64(len(src) * 4))
				b.ReportAllocs()
				for b.Loop() {
					if err := ggmlQuantize(t, dst, src, n, weights); err != nil {
						b.Fatal(err)
					}
				}
			})
			// Alternating the two codecs iteration by iteration keeps a loaded
			// machine's changing speed out of the ratio. Where the thread's
			// CPU clock can be read, the ratio of CPU times is reported too:
			// time spent descheduled on a shared machine does not count.
			b.Run(t.String()+"/"+path+"/ratio", func(b *testing.B) {
				if err := ggmlQuantize(t, dst, src, n, weights); err != nil {
					b.Skip(err)
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var goTime, cTime, goCPU, cCPU time.Duration
				for b.Loop() {
					// The same clock reads bracket both codecs.
					c0, _ := threadCPU()
					t0 := time.Now()
					if err := QuantizeRows(t, dst, src, n, weights, 1); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					c1, _ := threadCPU()
					t2 := time.Now()
					if err := ggmlQuantize(t, dst, src, n, weights); err != nil {
						b.Fatal(err)
					}
					t3 := time.Now()
					c2, _ := threadCPU()
					goTime += t1.Sub(t0)
					cTime += t3.Sub(t2)
					goCPU += c1 - c0
					cCPU += c2 - c1
				}
				b.ReportMetric(float64(goTime)/float64(cTime), "go/ggml-time")
				if _, ok := threadCPU(); ok && cCPU > 0 {
					b.ReportMetric(float64(goCPU)/float64(cCPU), "go/ggml-cpu")
				}
			})
		}
	}
}

// BenchmarkQuantizeRows measures QuantizeRows with one and two workers on a
// larger matrix (256 rows of 4096), for the speed-up of the row split.
func BenchmarkQuantizeRows(b *testing.B) {
	const n, rows = 4096, 256
	r := rand.New(rand.NewPCG(harnessSeed, 8))
	src := make([]float32, n*rows)
	gaussRow(r, src)
	for _, t := range []formats.DType{formats.Q8_0, formats.Q4_0, formats.Q4_K, formats.Q6_K} {
		if !CanQuantize(t) {
			continue
		}
		rb, _ := t.RowBytes(n)
		dst := make([]byte, int(rb)*rows)
		for _, workers := range []int{1, 2} {
			b.Run(t.String()+"/workers="+string(rune('0'+workers)), func(b *testing.B) {
				b.SetBytes(int64(len(src) * 4))
				b.ReportAllocs()
				for b.Loop() {
					if err := QuantizeRows(t, dst, src, n, nil, workers); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

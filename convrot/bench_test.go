package convrot

import (
	"testing"
)

// The benchmarks quantize rows of a Flux-sized layer (in = 3072, G = 256)
// and report rows per second. Run them together so that the ratio of the
// fast transform to the dense alternative comes from one run:
//
//	go test ./convrot -run '^$' -bench RotateQuantize
const benchRows, benchIn, benchG = 64, 3072, 256

// BenchmarkRotateQuantize compares, on the same rows: the fast transform
// plus INT8 quantization (what sdtool does), the same quantization after a
// dense H_G product per group (the obvious alternative), and plain per-row
// INT8 without rotation (the floor).
func BenchmarkRotateQuantize(b *testing.B) {
	w := gaussianWithOutliers(benchRows, benchIn, 1, 40)
	codes := make([]byte, benchRows*benchIn)
	scales := make([]float32, benchRows)
	work := make([]float32, len(w))

	b.Run("fast", func(b *testing.B) {
		q, _ := NewInt8Rows(benchIn, benchG)
		b.SetBytes(int64(4 * len(w)))
		for b.Loop() {
			copy(work, w)
			if err := q.Quantize(codes, scales, work); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*benchRows)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("dense", func(b *testing.B) {
		h64, _ := DenseHadamard(benchG)
		h := make([]float32, len(h64))
		for i, v := range h64 {
			h[i] = float32(v)
		}
		plain, _ := NewInt8Rows(benchIn, 0)
		tmp := make([]float32, benchG)
		b.SetBytes(int64(4 * len(w)))
		for b.Loop() {
			copy(work, w)
			for off := 0; off < len(work); off += benchG {
				denseRotate(work[off:off+benchG], h, tmp)
			}
			if err := plain.Quantize(codes, scales, work); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*benchRows)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("plain", func(b *testing.B) {
		q, _ := NewInt8Rows(benchIn, 0)
		b.SetBytes(int64(4 * len(w)))
		for b.Loop() {
			copy(work, w)
			if err := q.Quantize(codes, scales, work); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*benchRows)/b.Elapsed().Seconds(), "rows/s")
	})
}

// denseRotate replaces x (one group) by x·H with a dense float32 product,
// using tmp as scratch: O(G²) per group against the fast transform's
// O(G·log G).
func denseRotate(x, h, tmp []float32) {
	g := len(x)
	clear(tmp)
	for k, v := range x {
		row := h[k*g : (k+1)*g]
		for j, hv := range row {
			tmp[j] += v * hv
		}
	}
	copy(x, tmp)
}

// BenchmarkDequantize measures decoding convrot rows back to floats.
func BenchmarkDequantize(b *testing.B) {
	w := gaussianWithOutliers(benchRows, benchIn, 1, 40)
	q, _ := NewInt8Rows(benchIn, benchG)
	codes := make([]byte, len(w))
	scales := make([]float32, benchRows)
	if err := q.Quantize(codes, scales, append([]float32(nil), w...)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(codes)))
	for b.Loop() {
		if err := q.Dequantize(w, codes, scales); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchRows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkErrorReduction reports, as a metric, how many times lower the
// reconstruction error of int8_convrot is than that of plain per-row INT8
// on Gaussian weights with outlier columns (the figure for BENCHMARKS.md).
func BenchmarkErrorReduction(b *testing.B) {
	w := gaussianWithOutliers(64, benchIn, 2026, 40)
	var factor float64
	for b.Loop() {
		factor = reconstructionError(b, w, 64, benchIn, 0) / reconstructionError(b, w, 64, benchIn, benchG)
	}
	b.ReportMetric(factor, "x-lower-error")
}

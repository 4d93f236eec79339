package quant

import (
	"fmt"
	"runtime"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/workpool"
)

// QuantizeRows encodes the rows of src (each nPerRow floats long) as type t
// into dst, which must hold exactly the encoded size of all rows. weights is
// nil for ggml's unweighted path, or nPerRow importance values used for every
// row, as ggml_quantize_chunk does. The rows are split into contiguous chunks
// across workers goroutines (workers < 1 means GOMAXPROCS); every row is
// encoded independently, so the bytes do not depend on the worker count.
func QuantizeRows(t formats.DType, dst []byte, src []float32, nPerRow int, weights []float32, workers int) error {
	c, err := Encoder(t)
	if err != nil {
		return err
	}
	if nPerRow <= 0 {
		return fmt.Errorf("quantize %s: row length %d is not positive", t, nPerRow)
	}
	if len(src)%nPerRow != 0 {
		return fmt.Errorf("quantize %s: %d floats is not a whole number of rows of %d", t, len(src), nPerRow)
	}
	rb, err := t.RowBytes(int64(nPerRow))
	if err != nil {
		return fmt.Errorf("quantize %s: %v", t, err)
	}
	nrows := len(src) / nPerRow
	if need := int64(nrows) * rb; int64(len(dst)) != need {
		return fmt.Errorf("quantize %s: output buffer is %d bytes, %d rows of %d need %d", t, len(dst), nrows, nPerRow, need)
	}
	if weights != nil && len(weights) != nPerRow {
		return fmt.Errorf("quantize %s: %d importance weights for rows of %d", t, len(weights), nPerRow)
	}
	if weights == nil && c.NeedsWeights {
		return fmt.Errorf("quantize %s: this type needs an importance matrix", t)
	}
	rowBytes := int(rb)
	workers = effectiveWorkers(workers, nrows)
	if workers == 1 {
		return quantizeSpan(c, dst, src, weights, nPerRow, rowBytes, 0, nrows)
	}
	return workpool.Ranges(nrows, workers, func(_, r0, r1 int) error {
		return quantizeSpan(c, dst, src, weights, nPerRow, rowBytes, r0, r1)
	})
}

// quantizeSpan encodes rows [r0, r1). It is a plain function, not a
// closure, so that the single-worker path allocates nothing.
func quantizeSpan(c Codec, dst []byte, src, weights []float32, nPerRow, rowBytes, r0, r1 int) (err error) {
	defer recoverCodec(&err, "quantize", c.Type, r0, r1)
	if c.elementwise {
		// An element-wise codec does not see row boundaries: one call
		// encodes the whole span.
		c.Quantize(dst[r0*rowBytes:r1*rowBytes], src[r0*nPerRow:r1*nPerRow], nil)
		return nil
	}
	for r := r0; r < r1; r++ {
		c.Quantize(dst[r*rowBytes:(r+1)*rowBytes], src[r*nPerRow:(r+1)*nPerRow], weights)
	}
	return nil
}

// DequantizeRows decodes src, a whole number of blocks of type t, into dst,
// which must hold exactly the decoded element count. The blocks are split
// into contiguous chunks across workers goroutines (workers < 1 means
// GOMAXPROCS).
func DequantizeRows(t formats.DType, dst []float32, src []byte, workers int) error {
	c, err := Decoder(t)
	if err != nil {
		return err
	}
	info := t.Info()
	need, err := t.RowBytes(int64(len(dst)))
	if err != nil {
		return fmt.Errorf("dequantize %s: %v", t, err)
	}
	if int64(len(src)) != need {
		return fmt.Errorf("dequantize %s: %d bytes of input, %d elements need %d", t, len(src), len(dst), need)
	}
	bs, bb := info.BlockSize, info.BlockBytes
	nblocks := len(dst) / bs
	// Hand out groups of blocks so that tiny chunks do not dominate.
	const group = 64
	ngroups := (nblocks + group - 1) / group
	workers = effectiveWorkers(workers, ngroups)
	if workers <= 1 {
		return dequantizeSpan(c, dst, src, bs, bb, 0, nblocks)
	}
	return workpool.Ranges(ngroups, workers, func(_, g0, g1 int) error {
		return dequantizeSpan(c, dst, src, bs, bb, min(g0*group, nblocks), min(g1*group, nblocks))
	})
}

// dequantizeSpan decodes blocks [b0, b1).
func dequantizeSpan(c Codec, dst []float32, src []byte, bs, bb, b0, b1 int) (err error) {
	defer recoverCodec(&err, "dequantize", c.Type, b0, b1)
	c.Dequantize(dst[b0*bs:b1*bs], src[b0*bb:b1*bb])
	return nil
}

// effectiveWorkers resolves a worker count: below 1 means GOMAXPROCS, and
// never more workers than units of work.
func effectiveWorkers(workers, units int) int {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	return max(1, min(workers, units))
}

// recoverCodec turns a panic inside a codec (a bug, never expected on
// validated input) into an error instead of taking the process down.
func recoverCodec(err *error, op string, t formats.DType, i0, i1 int) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s %s: codec failed on [%d, %d): %v", op, t, i0, i1, r)
	}
}

package quant

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/sdtool/sdtool/formats"
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
	run := func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			c.Quantize(dst[r*rowBytes:(r+1)*rowBytes], src[r*nPerRow:(r+1)*nPerRow], weights)
		}
	}
	return parallel(t, "quantize", nrows, workers, run)
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
	run := func(g0, g1 int) {
		b0, b1 := g0*group, min(g1*group, nblocks)
		c.Dequantize(dst[b0*bs:b1*bs], src[b0*bb:b1*bb])
	}
	return parallel(t, "dequantize", ngroups, workers, run)
}

// parallel runs fn over [0, n) split into at most workers contiguous
// chunks. A panic inside a codec (a bug, never expected on valid input)
// becomes an error instead of taking the process down.
func parallel(t formats.DType, op string, n, workers int, fn func(i0, i1 int)) error {
	if n == 0 {
		return nil
	}
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n)
	guarded := func(i0, i1 int) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%s %s: codec failed on chunk [%d, %d): %v", op, t, i0, i1, r)
			}
		}()
		fn(i0, i1)
		return nil
	}
	if workers == 1 {
		return guarded(0, n)
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		i0, i1 := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = guarded(i0, i1)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

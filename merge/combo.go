package merge

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// statChunk is the number of elements the statistics pass of slerp and TIES
// reads at once: a fixed size, so the sums (and hence the output) do not
// depend on the pipeline's chunking (a variable so that tests can vary it).
var statChunk int64 = 1 << 18

// statScratch recycles the buffers of statistics passes between tensors:
// fresh multi-megabyte buffers per tensor would leave garbage that the
// collector lets grow to the size of the live heap.
var statScratch = sync.Pool{New: func() any { return new(tensor.Scratch) }}

// histPool recycles TIES's 512 KiB histograms for the same reason.
var histPool = sync.Pool{New: func() any { h := make([]int64, 1<<16); return &h }}

// combo produces one merged tensor: it reads A and the peers (B, then C) as
// float32 through package tensor, combines them element-wise and encodes
// the result. Slerp and TIES first stream the whole tensor once (twice for
// TIES) for their statistics; the first chunk to need them computes them
// and the others of the same tensor wait.
type combo struct {
	method Method
	alpha  float32
	a      *tensor.Source
	peers  []*tensor.Source
	out    formats.DType
	enc    quant.Codec
	rowLen int64

	density float64 // TIES
	dropP   float64 // DARE
	seed    int64   // DARE

	once    sync.Once
	statErr error
	tau     []uint32 // TIES: per peer, the magnitude threshold as float32 bits
	s0, s1  float32  // slerp coefficients of A and B
	lerp    bool     // slerp fell back to lerp
	keys    []uint64 // DARE: per peer
}

func newCombo(m Method, alpha float64, a *tensor.Source, peers []*tensor.Source, out formats.DType) (*combo, error) {
	if err := a.Err(); err != nil {
		return nil, err
	}
	enc, err := quant.Encoder(out)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", a.Name, err)
	}
	if enc.NeedsWeights {
		return nil, fmt.Errorf("tensor %q: %s needs an importance matrix", a.Name, out)
	}
	return &combo{method: m, alpha: float32(alpha), a: a, peers: peers, out: out, enc: enc}, nil
}

// Prepare checks the output and returns the scratch one row needs: a float
// buffer per input plus dequant's raw and unaligned buffers.
func (c *combo) Prepare(o *pipeline.Output) (int64, error) {
	if o.Type != c.out {
		return 0, fmt.Errorf("tensor %q: producer encodes %s, the output is %s", o.Name, c.out, o.Type)
	}
	n := o.Elements()
	if n != c.a.Elements() {
		return 0, fmt.Errorf("tensor %q: output has %d elements, A's tensor %d", o.Name, n, c.a.Elements())
	}
	rows, _, err := o.Rows()
	if err != nil || rows == 0 {
		return 0, err
	}
	c.rowLen = n / rows
	raw := c.a.RawBytes(c.rowLen)
	for _, p := range c.peers {
		raw = max(raw, p.RawBytes(c.rowLen))
	}
	return 4*c.rowLen*int64(2+len(c.peers)) + raw, nil
}

// Produce merges rows [firstRow, firstRow+nRows).
func (c *combo) Produce(ctx context.Context, dst []byte, firstRow, nRows int64, s *tensor.Scratch) error {
	if nRows <= 0 {
		return nil
	}
	if c.rowLen == 0 {
		return fmt.Errorf("tensor %q: producer used before Prepare", c.a.Name)
	}
	n := int(nRows * c.rowLen)
	first := firstRow * c.rowLen
	a := s.Float32s(0, n)
	if err := c.a.Read(a, first, s); err != nil {
		return err
	}
	xs := make([][]float32, len(c.peers))
	for i, p := range c.peers {
		xs[i] = s.Float32s(1+i, n)
		if err := p.Read(xs[i], first, s); err != nil {
			return err
		}
	}
	if err := c.stats(ctx); err != nil {
		return err
	}
	c.apply(a, xs, first)
	for r := 0; r < int(nRows); r++ {
		// Encode row by row: every codec, float or block, takes whole rows.
		rb := len(dst) / int(nRows)
		c.enc.Quantize(dst[r*rb:(r+1)*rb], a[r*int(c.rowLen):(r+1)*int(c.rowLen)], nil)
	}
	return nil
}

// stats computes the whole-tensor statistics once.
func (c *combo) stats(ctx context.Context) error {
	c.once.Do(func() {
		switch c.method {
		case Slerp:
			c.statErr = c.slerpStats(ctx)
		case TIES:
			c.statErr = c.tiesStats(ctx)
		case DARE:
			c.keys = make([]uint64, len(c.peers))
			for i := range c.peers {
				c.keys[i] = Key(c.seed, c.a.Name, i)
			}
		}
	})
	return c.statErr
}

// stream reads the whole tensor from A and the peers in statChunk pieces
// and calls f on each piece; f gets the index of the piece's first element.
func (c *combo) stream(ctx context.Context, f func(first int64, a []float32, xs [][]float32)) error {
	s := statScratch.Get().(*tensor.Scratch)
	defer statScratch.Put(s)
	total := c.a.Elements()
	xs := make([][]float32, len(c.peers))
	for first := int64(0); first < total; first += statChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := int(min(statChunk, total-first))
		a := s.Float32s(0, n)
		if err := c.a.Read(a, first, s); err != nil {
			return err
		}
		for i, p := range c.peers {
			xs[i] = s.Float32s(1+i, n)
			if err := p.Read(xs[i], first, s); err != nil {
				return err
			}
		}
		f(first, a, xs)
	}
	return nil
}

// slerpStats computes the angle between A and B and slerp's coefficients.
func (c *combo) slerpStats(ctx context.Context) error {
	var dot, na, nb float64
	err := c.stream(ctx, func(_ int64, a []float32, xs [][]float32) {
		b := xs[0][:len(a)]
		for i, x := range a {
			y := float64(b[i])
			dot += float64(x) * y
			na += float64(x) * float64(x)
			nb += y * y
		}
	})
	if err != nil {
		return err
	}
	c.s0, c.s1, c.lerp = slerpCoefficients(dot, na, nb, float64(c.alpha))
	return nil
}

// slerpCoefficients returns the weights of A and B: sin((1-t)Ω)/sin Ω and
// sin(tΩ)/sin Ω, or 1-t and t when the tensors are nearly colinear (or one
// is zero), where lerp is what slerp tends to.
func slerpCoefficients(dot, na, nb, t float64) (s0, s1 float32, lerp bool) {
	if na == 0 || nb == 0 {
		return float32(1 - t), float32(t), true
	}
	cos := dot / math.Sqrt(na*nb)
	if math.IsNaN(cos) || math.Abs(cos) > slerpDotThreshold {
		return float32(1 - t), float32(t), true
	}
	omega := math.Acos(cos)
	sin := math.Sin(omega)
	return float32(math.Sin((1-t)*omega) / sin), float32(math.Sin(t*omega) / sin), false
}

// absBits returns |x|'s bits; for non-negative floats their order as
// integers is their order as numbers (NaNs sort above +Inf).
func absBits(x float32) uint32 { return math.Float32bits(x) &^ (1 << 31) }

// tiesStats finds, for every peer, the k-th largest |delta| exactly with a
// two-pass radix selection on the float bits: the first pass histograms the
// top 16 bits, the second the low 16 bits inside the bucket that holds the
// k-th value. Memory is two histograms per peer, whatever the tensor size.
func (c *combo) tiesStats(ctx context.Context) error {
	n := c.a.Elements()
	c.tau = make([]uint32, len(c.peers))
	if c.density >= 1 || n == 0 {
		return nil // keep everything (tau 0: every non-zero delta)
	}
	k := min(max(int64(math.Ceil(c.density*float64(n))), 1), n)
	hist := make([][]int64, len(c.peers))
	for i := range hist {
		h := histPool.Get().(*[]int64)
		defer histPool.Put(h)
		hist[i] = *h
		clear(hist[i])
	}
	err := c.stream(ctx, func(_ int64, a []float32, xs [][]float32) {
		for j, x := range xs {
			h := hist[j]
			x = x[:len(a)]
			for i := range a {
				h[absBits(x[i]-a[i])>>16]++
			}
		}
	})
	if err != nil {
		return err
	}
	hi := make([]uint32, len(c.peers))
	rem := make([]int64, len(c.peers))
	for j, h := range hist {
		hi[j], rem[j] = kthBucket(h, k)
		clear(h)
	}
	err = c.stream(ctx, func(_ int64, a []float32, xs [][]float32) {
		for j, x := range xs {
			h, top := hist[j], hi[j]
			x = x[:len(a)]
			for i := range a {
				if b := absBits(x[i] - a[i]); b>>16 == top {
					h[b&0xffff]++
				}
			}
		}
	})
	if err != nil {
		return err
	}
	for j, h := range hist {
		lo, _ := kthBucket(h, rem[j])
		c.tau[j] = hi[j]<<16 | lo
	}
	return nil
}

// kthBucket scans a histogram from the top and returns the bucket holding
// the k-th largest value and that value's rank inside the bucket.
func kthBucket(h []int64, k int64) (bucket uint32, rank int64) {
	var above int64
	for b := len(h) - 1; b >= 0; b-- {
		if above+h[b] >= k {
			return uint32(b), k - above
		}
		above += h[b]
	}
	return 0, k - above // unreachable when k <= the count
}

// apply combines the chunk in place into a; first is the index of a[0] in
// the tensor. Products are rounded to float32 explicitly so that no
// platform fuses them into multiply-adds: the bytes are the same everywhere.
func (c *combo) apply(a []float32, xs [][]float32, first int64) {
	al := c.alpha
	switch c.method {
	case copyA:
	case WeightedSum:
		b := xs[0][:len(a)]
		w0 := 1 - al
		for i, x := range a {
			a[i] = float32(w0*x) + float32(al*b[i])
		}
	case AddDifference:
		b, cc := xs[0][:len(a)], xs[1][:len(a)]
		for i, x := range a {
			a[i] = x + float32(al*(b[i]-cc[i]))
		}
	case Slerp:
		b := xs[0][:len(a)]
		s0, s1 := c.s0, c.s1
		for i, x := range a {
			a[i] = float32(s0*x) + float32(s1*b[i])
		}
	case TIES:
		for i, x := range a {
			var sum float32
			for j, xj := range xs {
				if d := xj[i] - x; d != 0 && absBits(d) >= c.tau[j] {
					sum += d
				}
			}
			if sum == 0 {
				continue
			}
			var agree float32
			var cnt int
			for j, xj := range xs {
				if d := xj[i] - x; d != 0 && absBits(d) >= c.tau[j] && (d > 0) == (sum > 0) {
					agree += d
					cnt++
				}
			}
			a[i] = x + float32(al*(agree/float32(cnt)))
		}
	case DARE:
		p := c.dropP
		scale := float32(1 / (1 - p))
		m := float32(len(xs))
		for i, x := range a {
			var sum float32
			for j, xj := range xs {
				if Uniform(c.keys[j], first+int64(i)) >= p {
					sum += float32((xj[i] - x) * scale)
				}
			}
			a[i] = x + float32(al*(sum/m))
		}
	}
}

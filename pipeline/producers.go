package pipeline

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// copyProducer copies a source tensor's raw bytes.
type copyProducer struct {
	m formats.Model
	t formats.Tensor
}

// Copy returns a producer that copies t's bytes unchanged (the output may
// have another name or shape, but must have t's type and size). Chunks are
// read with ReadTensorAt straight into the output buffer.
func Copy(m formats.Model, t formats.Tensor) Producer {
	return &copyProducer{m: m, t: t}
}

// Prepare checks that the output has the source's type and size.
func (p *copyProducer) Prepare(o *Output) (int64, error) {
	if o.Type != p.t.Type {
		return 0, fmt.Errorf("tensor %q: cannot copy %s data of %q into a %s tensor", o.Name, p.t.Type, p.t.Name, o.Type)
	}
	size, err := o.Bytes()
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %v", o.Name, err)
	}
	if size != p.t.Size {
		return 0, fmt.Errorf("tensor %q: output shape %v needs %d bytes, source %q in %s has %d",
			o.Name, o.Shape, size, p.t.Name, p.t.File, p.t.Size)
	}
	return 0, nil
}

// Produce reads the bytes of the requested rows.
func (p *copyProducer) Produce(_ context.Context, dst []byte, firstRow, nRows int64, _ *tensor.Scratch) error {
	if nRows <= 0 {
		return nil
	}
	// Rows are located by bytes, so a reshaped copy needs no row mapping.
	rowBytes := int64(len(dst)) / nRows
	return formats.ReadFull(p.m, &p.t, dst, firstRow*rowBytes)
}

// RowEncoder encodes src, made of rows of rowLen floats, into dst, which
// holds exactly the output bytes of those rows. It may overwrite src.
type RowEncoder func(dst []byte, src []float32, rowLen int) error

// EncodeRows adapts a row quantizer (the shape of quant.Codec.Quantize) to
// a RowEncoder for type t. weights is nil (ggml's unweighted path) or one
// importance value per element of a row, applied to every row.
func EncodeRows(t formats.DType, quantize func(dst []byte, src, weights []float32), weights []float32) RowEncoder {
	return func(dst []byte, src []float32, rowLen int) error {
		if weights == nil {
			// Unweighted block codecs treat every block alike, so all rows go in one call.
			quantize(dst, src, nil)
			return nil
		}
		if len(weights) != rowLen {
			return fmt.Errorf("importance vector of %d values for rows of %d elements", len(weights), rowLen)
		}
		rb, err := t.RowBytes(int64(rowLen))
		if err != nil {
			return err
		}
		for len(src) > 0 {
			quantize(dst[:rb], src[:rowLen], weights)
			dst, src = dst[rb:], src[rowLen:]
		}
		return nil
	}
}

// convertProducer reads an output's elements from a source as float32 and
// encodes them.
type convertProducer struct {
	src    *tensor.Source
	encode RowEncoder
	out    formats.DType
	rowLen int64 // output elements per row unit
	// nonFinite and spoiled count Damage; chunks of one output run on
	// several workers at once.
	nonFinite, spoiled atomic.Int64
}

// Damage is what encoding did to an output's values: inputs that were NaN
// or infinite, and finite inputs that came out non-finite (a block scale
// that overflowed, or a non-finite value elsewhere in the block); Written
// counts the non-finite values of an output whose producer does not say
// (the engine counts them in the bytes written).
type Damage struct{ NonFinite, Spoiled, Written int64 }

// Damaged is implemented by producers that count the Damage they did.
type Damaged interface{ Damage() Damage }

// Damage returns the counts so far.
func (p *convertProducer) Damage() Damage {
	return Damage{NonFinite: p.nonFinite.Load(), Spoiled: p.spoiled.Load()}
}

// checkAbove is the magnitude from which a chunk's encoding is decoded
// again to look for overflow: below every type's range (fp8 e4m3 stops at
// 448, f16 at 65504, block scales beyond), above nearly every weight, so
// that ordinary chunks cost one scan and no decode.
const checkAbove = 256

// Convert returns a producer that reads the output's rows from src as
// float32 (any stored type, ComfyUI modules included; any reshape that
// keeps the element order) and encodes them to type to with encode.
func Convert(src *tensor.Source, to formats.DType, encode RowEncoder) Producer {
	return &convertProducer{src: src, out: to, encode: encode}
}

// Prepare checks the element count and returns the scratch one row needs:
// its floats, its raw source bytes and an unaligned-range buffer.
func (p *convertProducer) Prepare(o *Output) (int64, error) {
	if err := p.src.Err(); err != nil {
		return 0, err
	}
	if p.encode == nil {
		return 0, fmt.Errorf("tensor %q: converting %s to %s: no encoder", o.Name, p.src.TypeName(), p.out)
	}
	if o.Type != p.out {
		return 0, fmt.Errorf("tensor %q: producer encodes %s but the output is %s", o.Name, p.out, o.Type)
	}
	n := o.Elements()
	if n != p.src.Elements() {
		return 0, fmt.Errorf("tensor %q: output shape %v has %d elements, source %q in %s has %d",
			o.Name, o.Shape, n, p.src.Name, p.src.Tensor.File, p.src.Elements())
	}
	rows, _, err := o.Rows()
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %v", o.Name, err)
	}
	if rows == 0 {
		return 0, nil
	}
	p.rowLen = n / rows
	return 8*p.rowLen + p.src.RawBytes(p.rowLen), nil
}

// Produce decodes and encodes rows [firstRow, firstRow+nRows).
func (p *convertProducer) Produce(_ context.Context, dst []byte, firstRow, nRows int64, s *tensor.Scratch) error {
	if nRows <= 0 {
		return nil
	}
	if p.rowLen == 0 {
		return fmt.Errorf("tensor %q: convert producer used before Prepare", p.src.Name)
	}
	f := s.Float32s(0, int(nRows*p.rowLen))
	if err := p.src.Read(f, firstRow*p.rowLen, s); err != nil {
		return err
	}
	var nonFinite int64
	var amax float32
	for _, v := range f {
		if a := float32(math.Abs(float64(v))); a <= math.MaxFloat32 {
			amax = max(amax, a)
		} else {
			nonFinite++ // NaN or Inf
		}
	}
	if err := p.encode(dst, f, int(p.rowLen)); err != nil {
		return fmt.Errorf("encoding %s: %w", p.out, err)
	}
	if nonFinite == 0 && amax < checkAbove {
		return nil
	}
	p.nonFinite.Add(nonFinite)
	back := s.Float32s(1, len(f))
	if quant.DecodeFloats(p.out, back, dst) != nil {
		return nil // no decoder: nothing to count spoiled values with
	}
	var spoiled int64
	for i, v := range f {
		if math.Abs(float64(v)) <= math.MaxFloat32 && math.Abs(float64(back[i])) > math.MaxFloat32 {
			spoiled++
		}
	}
	p.spoiled.Add(spoiled)
	return nil
}

// Constant returns a producer of fixed bytes (a comfy_quant marker, a
// tensor-wise scale): rows of the output are consecutive slices of b.
func Constant(b []byte) Producer {
	return ProducerFunc(func(_ context.Context, dst []byte, first, n int64, _ *tensor.Scratch) error {
		if n <= 0 {
			return nil
		}
		rb := int64(len(dst)) / n
		if (first+n)*rb > int64(len(b)) {
			return fmt.Errorf("constant of %d bytes: rows [%d, %d) of %d bytes out of range", len(b), first, first+n, rb)
		}
		copy(dst, b[first*rb:])
		return nil
	})
}

package pipeline

import (
	"context"
	"fmt"

	"github.com/sdtool/sdtool/formats"
)

// Scratch holds one worker's reusable buffers. Buffers are indexed by slot so
// that a producer can hold several at once; a buffer keeps its capacity
// between chunks, so a steady stream of chunks allocates nothing.
type Scratch struct {
	bytes  [][]byte
	floats [][]float32
}

// Bytes returns a buffer of n bytes in the given slot (its contents are
// whatever the last user left there).
func (s *Scratch) Bytes(slot, n int) []byte {
	for len(s.bytes) <= slot {
		s.bytes = append(s.bytes, nil)
	}
	if cap(s.bytes[slot]) < n {
		s.bytes[slot] = make([]byte, n)
	}
	return s.bytes[slot][:n]
}

// Float32s returns a buffer of n float32 values in the given slot.
func (s *Scratch) Float32s(slot, n int) []float32 {
	for len(s.floats) <= slot {
		s.floats = append(s.floats, nil)
	}
	if cap(s.floats[slot]) < n {
		s.floats[slot] = make([]float32, n)
	}
	return s.floats[slot][:n]
}

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
func (p *copyProducer) Produce(_ context.Context, dst []byte, firstRow, nRows int64, _ *Scratch) error {
	if nRows <= 0 {
		return nil
	}
	// Rows are located by bytes, so a reshaped copy needs no row mapping.
	rowBytes := int64(len(dst)) / nRows
	return formats.ReadFull(p.m, &p.t, dst, firstRow*rowBytes)
}

// Decoder decodes src, a whole number of blocks of the source type, into dst
// (one float per element).
type Decoder func(dst []float32, src []byte) error

// Encoder encodes src, made of rows of rowLen floats, into dst, which holds
// exactly the output bytes of those rows.
type Encoder func(dst []byte, src []float32, rowLen int) error

// DecodeWith adapts a decoding function that cannot fail (the shape of
// quant.Codec.Dequantize) to a Decoder.
func DecodeWith(f func(dst []float32, src []byte)) Decoder {
	return func(dst []float32, src []byte) error {
		f(dst, src)
		return nil
	}
}

// EncodeWith adapts a row quantizer (the shape of quant.Codec.Quantize) to an
// Encoder for type t. weights is nil (ggml's unweighted path) or one
// importance value per element of a row, applied to every row.
func EncodeWith(t formats.DType, quantize func(dst []byte, src, weights []float32), weights []float32) Encoder {
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

// convertProducer decodes source rows to float32 and encodes them.
type convertProducer struct {
	m       formats.Model
	t       formats.Tensor
	dst     formats.DType
	decode  Decoder
	encode  Encoder
	rowLen  int64 // output elements per row unit
	srcRow  int64 // source bytes per row unit
	checked bool
}

// Convert returns a producer that reads t's rows into a reusable buffer,
// decodes them to float32 with decode and encodes them to dstType with
// encode. The output must have t's element count; its rows are taken from
// t's data in element order, so a reshape is allowed when the row boundaries
// fall on whole blocks of t's type.
func Convert(m formats.Model, t formats.Tensor, dstType formats.DType, decode Decoder, encode Encoder) Producer {
	return &convertProducer{m: m, t: t, dst: dstType, decode: decode, encode: encode}
}

// Prepare checks the output against the source and returns the scratch
// (source bytes and floats) one row needs.
func (p *convertProducer) Prepare(o *Output) (int64, error) {
	if p.decode == nil || p.encode == nil {
		return 0, fmt.Errorf("tensor %q: converting %s to %s: no decoder or encoder", o.Name, p.t.Type, p.dst)
	}
	if o.Type != p.dst {
		return 0, fmt.Errorf("tensor %q: producer encodes %s but the output is %s", o.Name, p.dst, o.Type)
	}
	n := o.Elements()
	if n != p.t.Elements() {
		return 0, fmt.Errorf("tensor %q: output shape %v has %d elements, source %q in %s has %d",
			o.Name, o.Shape, n, p.t.Name, p.t.File, p.t.Elements())
	}
	rows, _, err := o.Rows()
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %v", o.Name, err)
	}
	if rows == 0 {
		p.checked = true
		return 0, nil
	}
	p.rowLen = n / rows
	p.srcRow, err = p.t.Type.RowBytes(p.rowLen)
	if err != nil {
		return 0, fmt.Errorf("tensor %q: rows of %d elements do not split source %q (%s) on block boundaries: %v",
			o.Name, p.rowLen, p.t.Name, p.t.Type, err)
	}
	if p.srcRow*rows != p.t.Size {
		return 0, fmt.Errorf("%s: tensor %q: %d bytes of %s data, expected %d for %d elements",
			p.t.File, p.t.Name, p.t.Size, p.t.Type, p.srcRow*rows, n)
	}
	p.checked = true
	return p.srcRow + 4*p.rowLen, nil
}

// Produce converts the requested rows using the worker's scratch buffers.
func (p *convertProducer) Produce(_ context.Context, dst []byte, firstRow, nRows int64, s *Scratch) error {
	if nRows <= 0 {
		return nil
	}
	if !p.checked {
		return fmt.Errorf("tensor %q: convert producer used before Prepare", p.t.Name)
	}
	src := s.Bytes(0, int(nRows*p.srcRow))
	if err := formats.ReadFull(p.m, &p.t, src, firstRow*p.srcRow); err != nil {
		return err
	}
	f := s.Float32s(0, int(nRows*p.rowLen))
	if err := p.decode(f, src); err != nil {
		return fmt.Errorf("%s: tensor %q: decoding %s: %w", p.t.File, p.t.Name, p.t.Type, err)
	}
	if err := p.encode(dst, f, int(p.rowLen)); err != nil {
		return fmt.Errorf("encoding %s: %w", p.dst, err)
	}
	return nil
}

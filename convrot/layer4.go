package convrot

import (
	"fmt"

	"github.com/sdtool/sdtool/formats/comfyquant"
)

// blockConfig fills c for the microscaled and 4-bit types; it returns false
// (with p.Keep and p.Note set) for a weight the format cannot hold. A
// rotation group that does not divide the row length falls back to the
// largest power of four that does, as ComfyUI accepts any.
func (p *Layer) blockConfig(c *comfyquant.QuantConfig, out, in int64, group int) bool {
	keep := func(format string, why string) bool {
		p.Keep, p.Note = true, fmt.Sprintf("%s: %s; kept float", format, why)
		return false
	}
	switch p.Type {
	case NVFP4:
		c.Format = comfyquant.FormatNVFP4
		if out%NVFP4Block != 0 || in%NVFP4Block != 0 {
			return keep(c.Format, fmt.Sprintf("[%d, %d] is not a multiple of %d both ways (ComfyUI would pad it)", out, in, NVFP4Block))
		}
	case MXFP8:
		c.Format = comfyquant.FormatMXFP8
		if in%MXFP8Block != 0 {
			return keep(c.Format, fmt.Sprintf("in=%d is not a multiple of %d (ComfyUI would pad it)", in, MXFP8Block))
		}
	case W4A4, W4A8:
		c.Format = comfyquant.FormatW4A4
		if p.Type == W4A8 {
			c.Format, c.QuantGroupSize = comfyquant.FormatW4A8, W4A8DefaultGroup
		}
		if group == 0 {
			group = comfyquant.DefaultGroupSize
		}
		g := group
		for g >= 4 && in%int64(g) != 0 {
			g /= 4
		}
		switch {
		case p.Type == W4A4 && in%W4A4KernelGroup != 0:
			return keep(c.Format, fmt.Sprintf("in=%d is not a multiple of %d (comfy-kitchen's int4 kernel)", in, W4A4KernelGroup))
		case p.Type == W4A8 && CheckW4A8Shape(int(in), c.QuantGroupSize, max(g, 4)) != nil:
			return keep(c.Format, fmt.Sprintf("in=%d is not a multiple of 16", in))
		case g < 4:
			return keep(c.Format, fmt.Sprintf("in=%d has no power-of-four rotation group", in))
		case g != group:
			p.Note = fmt.Sprintf("in=%d not divisible by %d: convrot group %d", in, group, g)
		}
		c.GroupSize = g
	}
	return true
}

// EncodeBlock quantizes a whole weight (out·in floats, row-major) for an
// nvfp4, mxfp8, convrot_w4a4 or asym_w4a8_int8 layer and returns the bytes
// of each of its tensors in Layout.Tensors order, the marker left out. w is
// overwritten. weights (one importance per input column, or nil) steer the
// block scales of nvfp4 and mxfp8; the rotated formats ignore them, since a
// per-column importance does not survive the rotation as a per-column one.
func (p *Layer) EncodeBlock(w []float32, weights []float32) ([][]byte, error) {
	out, in := int(p.Source.Shape[0]), int(p.Source.Shape[1])
	if len(w) != out*in || weights != nil && len(weights) != in {
		return nil, fmt.Errorf("tensor %q: %d values for shape [%d, %d]", p.Source.Name, len(w), out, in)
	}
	if _, ok := absMax(w); !ok {
		return nil, fmt.Errorf("tensor %q: a value is NaN or infinite", p.Source.Name)
	}
	g := p.Config.GroupSize
	var err error
	switch p.Config.Format {
	case comfyquant.FormatNVFP4, comfyquant.FormatMXFP8:
		return p.encodeMicro(w, weights, out, in)
	case comfyquant.FormatW4A4:
		codes, scales := make([]byte, out*in/2), make([]float32, out)
		for r := 0; r < out && err == nil; r++ {
			scales[r], err = EncodeW4A4Row(codes[r*in/2:(r+1)*in/2], w[r*in:(r+1)*in], g)
		}
		return [][]byte{codes, PutScales(nil, scales)}, wrap(p, err)
	case comfyquant.FormatW4A8:
		for r := 0; r < out && err == nil; r++ {
			err = Rotate(w[r*in:(r+1)*in], g)
		}
		if err != nil {
			return nil, wrap(p, err)
		}
		gs := p.Config.QuantGroupSize
		q := W4A8Quantizer{GroupSize: gs, RotGroup: g, Codebook: ChooseW4A8Codebook(w, gs)}
		codes, sRel, ch := make([]byte, out*in/2), make([]byte, out*in/gs), make([]float32, out)
		for r := 0; r < out && err == nil; r++ {
			ch[r], err = q.EncodeRow(codes[r*in/2:(r+1)*in/2], sRel[r*in/gs:(r+1)*in/gs], w[r*in:(r+1)*in])
		}
		return [][]byte{codes, sRel, PutScales(nil, ch), PutScales(nil, q.Codebook[:])}, wrap(p, err)
	}
	return nil, fmt.Errorf("tensor %q: format %s is not a block format", p.Source.Name, p.Config.Format)
}

// encodeMicro encodes nvfp4 or mxfp8 and swizzles the block scales.
func (p *Layer) encodeMicro(w, weights []float32, out, in int) ([][]byte, error) {
	nv := p.Config.Format == comfyquant.FormatNVFP4
	block, rowBytes := MXFP8Block, in
	var ts float32
	if nv {
		block, rowBytes = NVFP4Block, in/2
		amax, _ := absMax(w)
		ts = NVFP4TensorScale(amax)
	}
	cols := in / block
	codes, rowScales := make([]byte, out*rowBytes), make([]byte, cols)
	shape := SwizzledScaleShape(int64(out), int64(cols))
	scales := make([]byte, shape[0]*shape[1])
	for r := range out {
		var err error
		if nv {
			err = EncodeNVFP4Row(codes[r*rowBytes:(r+1)*rowBytes], rowScales, w[r*in:(r+1)*in], ts, weights)
		} else {
			err = EncodeMXFP8Row(codes[r*rowBytes:(r+1)*rowBytes], rowScales, w[r*in:(r+1)*in], weights)
		}
		if err != nil {
			return nil, wrap(p, fmt.Errorf("row %d: %w", r, err))
		}
		for c, s := range rowScales {
			scales[SwizzleIndex(int64(r), int64(c), shape[1])] = s
		}
	}
	if nv {
		return [][]byte{codes, scales, PutScales(nil, []float32{ts})}, nil
	}
	return [][]byte{codes, scales}, nil
}

// wrap names the layer's tensor in an error.
func wrap(p *Layer, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("tensor %q: %w", p.Source.Name, err)
}

// BlockType reports the types EncodeBlock writes (nvfp4, mxfp8,
// convrot_w4a4, asym_w4a8_int8).
func BlockType(t Type) bool { return t == NVFP4 || t == MXFP8 || t == W4A4 || t == W4A8 }

// UsesImportance reports the types whose block scales an importance matrix
// steers (nvfp4, mxfp8).
func UsesImportance(t Type) bool { return t == NVFP4 || t == MXFP8 }

// QuantizesActivations reports the types whose runtimes quantize the
// activations too (INT8 as W8A8, convrot_w4a4 as W4A4, asym_w4a8_int8 as
// W4A8), as opposed to weight-only ones on CPU.
func QuantizesActivations(t Type) bool {
	return t == Int8Convrot || t == Int8 || t == W4A4 || t == W4A8
}

// InputScaleRange returns the largest magnitude a type's activation codes
// hold, which ComfyUI divides an activation maximum by to get input_scale
// (comfy-kitchen: fp8 amax/finfo.max, nvfp4 amax/(448·6)); ok is false for
// the types whose layers take no input_scale.
func InputScaleRange(t Type) (r float64, ok bool) {
	switch t {
	case FP8E4M3:
		return 448, true
	case FP8E5M2:
		return 57344, true
	case NVFP4:
		return 448 * 6, true
	}
	return 0, false
}

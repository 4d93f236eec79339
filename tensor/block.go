package tensor

import (
	"fmt"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/quant"
)

// blockDecoder decodes the rows of an nvfp4, mxfp8, convrot_w4a4 or
// asym_w4a8_int8 module exactly as ComfyUI's dequantization computes them
// (in float32). It holds the module's scales, unswizzled to row order, and
// is safe for concurrent use.
type blockDecoder struct {
	mod        comfyquant.Module
	in         int64     // logical row length
	rowBytes   int64     // stored bytes per weight row
	blocks     []byte    // nvfp4/mxfp8 block scales, w4a8 s_rel: [out, in/block] row order
	perRow     []float32 // w4a4 scale, w4a8 s_channel
	tensor     float32   // nvfp4 weight_scale_2
	codebook   []float32 // w4a8, nil without one
	correction []float32 // w4a8 weight_correction, [out, groups] row order; nil without
	block      int64     // values per block scale
}

// isBlockFormat reports a format blockDecoder decodes.
func isBlockFormat(f string) bool {
	switch f {
	case comfyquant.FormatNVFP4, comfyquant.FormatMXFP8, comfyquant.FormatW4A4, comfyquant.FormatW4A8:
		return true
	}
	return false
}

// readFloats reads a whole float tensor as float32.
func readFloats(m formats.Model, t *formats.Tensor) ([]float32, error) {
	raw, err := formats.ReadTensor(m, t)
	if err != nil {
		return nil, err
	}
	f := make([]float32, t.Elements())
	if err := quant.DecodeFloats(t.Type, f, raw); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", fileOf(m, t), t.Name, err)
	}
	return f, nil
}

// newBlockDecoder reads the module's scales.
func newBlockDecoder(m formats.Model, mod comfyquant.Module) (*blockDecoder, error) {
	shape := mod.Shape()
	out, in := shape[0], shape[1]
	d := &blockDecoder{mod: mod, in: in, rowBytes: mod.Weight.Shape[1]}
	var err error
	switch mod.Config.Format {
	case comfyquant.FormatNVFP4, comfyquant.FormatMXFP8:
		d.block = convrot.NVFP4Block
		if mod.Config.Format == comfyquant.FormatMXFP8 {
			d.block = convrot.MXFP8Block
		}
		raw, err := formats.ReadTensor(m, &mod.Scale)
		if err != nil {
			return nil, err
		}
		cols := in / d.block
		padded := convrot.SwizzledScaleShape(out, cols)[1]
		d.blocks = make([]byte, out*cols)
		for r := range out {
			for c := range cols {
				d.blocks[r*cols+c] = raw[convrot.SwizzleIndex(r, c, padded)]
			}
		}
		if mod.Config.Format == comfyquant.FormatNVFP4 {
			ts, err := readFloats(m, &mod.Scale2)
			if err != nil {
				return nil, err
			}
			d.tensor = ts[0]
		}
	case comfyquant.FormatW4A4:
		d.perRow, err = readFloats(m, &mod.Scale)
	case comfyquant.FormatW4A8:
		d.block = int64(mod.Config.QuantGroupSize)
		if d.blocks, err = formats.ReadTensor(m, &mod.Scale); err != nil {
			return nil, err
		}
		if d.perRow, err = readFloats(m, &mod.Scale2); err != nil {
			return nil, err
		}
		if mod.Codebook.Name != "" {
			if d.codebook, err = readFloats(m, &mod.Codebook); err != nil {
				return nil, err
			}
		}
		if mod.Correction.Name != "" {
			c, err := readFloats(m, &mod.Correction)
			if err != nil {
				return nil, err
			}
			// Stored [groups, out]: transpose to one row of groups per output row.
			groups := in / d.block
			d.correction = make([]float32, len(c))
			for g := range groups {
				for r := range out {
					d.correction[r*groups+g] = c[g*out+r]
				}
			}
		}
	}
	return d, err
}

// decode turns raw, whole stored weight rows starting at row first, into
// dst (the logical elements of those rows).
func (d *blockDecoder) decode(dst []float32, first int64, raw []byte) error {
	w := &d.mod.Weight
	if int64(len(raw))%d.rowBytes != 0 || int64(len(dst)) != int64(len(raw))/d.rowBytes*d.in {
		return fmt.Errorf("tensor %q: %d bytes and %d floats are not the same whole number of rows", w.Name, len(raw), len(dst))
	}
	n := int64(len(raw)) / d.rowBytes
	if first < 0 || first+n > w.Shape[0] {
		return fmt.Errorf("tensor %q: rows [%d, %d) out of range (%d rows)", w.Name, first, first+n, w.Shape[0])
	}
	g := d.mod.Config.GroupSize
	for i := range n {
		r := first + i
		row, codes := dst[i*d.in:(i+1)*d.in], raw[i*d.rowBytes:(i+1)*d.rowBytes]
		var err error
		switch d.mod.Config.Format {
		case comfyquant.FormatNVFP4:
			err = convrot.DecodeNVFP4Row(row, codes, d.blocks[r*d.in/d.block:(r+1)*d.in/d.block], d.tensor)
		case comfyquant.FormatMXFP8:
			err = convrot.DecodeMXFP8Row(row, codes, d.blocks[r*d.in/d.block:(r+1)*d.in/d.block])
		case comfyquant.FormatW4A4:
			err = convrot.DecodeW4A4Row(row, codes, d.perRow[r], g)
		case comfyquant.FormatW4A8:
			var corr []float32
			if d.correction != nil {
				corr = d.correction[r*d.in/d.block : (r+1)*d.in/d.block]
			}
			err = convrot.DecodeW4A8Row(row, codes, d.blocks[r*d.in/d.block:(r+1)*d.in/d.block], d.perRow[r], d.codebook, corr, int(d.block), g)
		}
		if err != nil {
			return fmt.Errorf("tensor %q: row %d: %w", w.Name, r, err)
		}
	}
	return nil
}

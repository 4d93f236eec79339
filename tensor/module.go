package tensor

import (
	"fmt"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/quant"
)

// moduleDecoder turns rows of a ComfyUI quantized module back into float32
// weights with the convrot codecs. It holds the module's scales (read
// once) and is safe for concurrent use.
type moduleDecoder struct {
	mod     comfyquant.Module
	rows    convrot.Int8Rows
	scales  []float32 // per row (INT8 per-row), else one value
	fp8     convrot.FP8
	isFP8   bool
	rowSize int64 // bytes per weight row
	block   *blockDecoder
}

// newModuleDecoder reads mod's scale tensor from m and returns its decoder.
func newModuleDecoder(m formats.Model, mod comfyquant.Module) (*moduleDecoder, error) {
	if mod.Unsupported || mod.Scale.Name == "" || len(mod.Weight.Shape) != 2 {
		return nil, fmt.Errorf("%s: module %q: cannot decode format %q (%w)", m.Path(), mod.Name, mod.Config.Format, comfyquant.ErrUnsupportedFormat)
	}
	if isBlockFormat(mod.Config.Format) {
		b, err := newBlockDecoder(m, mod)
		if err != nil {
			return nil, err
		}
		return &moduleDecoder{mod: mod, rowSize: mod.Weight.Shape[1], block: b}, nil
	}
	file := fileOf(m, &mod.Scale)
	raw, err := formats.ReadTensor(m, &mod.Scale)
	if err != nil {
		return nil, err
	}
	scales := make([]float32, mod.Scale.Elements())
	if err := quant.DecodeFloats(mod.Scale.Type, scales, raw); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", file, mod.Scale.Name, err)
	}
	if _, err := convrot.AbsMax(scales); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: a scale is NaN or infinite", file, mod.Scale.Name)
	}
	d := &moduleDecoder{mod: mod, scales: scales, rowSize: mod.Weight.Shape[1]}
	if t, ok := comfyquant.WeightType(mod.Config.Format); ok && t != formats.I8 {
		d.isFP8, d.fp8 = true, convrot.FP8{Type: t, Scale: scales[0]}
		return d, nil
	}
	g := 0
	if mod.Config.Convrot {
		g = mod.Config.GroupSize
	}
	if d.rows, err = convrot.NewInt8Rows(int(d.rowSize), g); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", fileOf(m, &mod.Weight), mod.Weight.Name, err)
	}
	return d, nil
}

// decode turns raw, whole weight rows starting at row first (one byte per
// element), into dst (the same number of elements).
func (d *moduleDecoder) decode(dst []float32, first int64, raw []byte) error {
	w := &d.mod.Weight
	if d.block != nil {
		return d.block.decode(dst, first, raw)
	}
	if len(raw) != len(dst) || int64(len(raw))%d.rowSize != 0 {
		return fmt.Errorf("tensor %q: %d bytes and %d floats are not the same whole number of rows of %d",
			w.Name, len(raw), len(dst), d.rowSize)
	}
	n := int64(len(raw)) / d.rowSize
	if first < 0 || first+n > w.Shape[0] {
		return fmt.Errorf("tensor %q: rows [%d, %d) out of range (%d rows)", w.Name, first, first+n, w.Shape[0])
	}
	if d.isFP8 {
		return d.fp8.Decode(dst, raw)
	}
	scales := d.scales
	if len(scales) == 1 && w.Shape[0] != 1 {
		// A tensor-wise INT8 scale: every row shares it.
		for r := int64(0); r < n; r++ {
			lo, hi := r*d.rowSize, (r+1)*d.rowSize
			if err := d.rows.Dequantize(dst[lo:hi], raw[lo:hi], scales); err != nil {
				return fmt.Errorf("tensor %q: %w", w.Name, err)
			}
		}
		return nil
	}
	if err := d.rows.Dequantize(dst, raw, scales[first:first+n]); err != nil {
		return fmt.Errorf("tensor %q: %w", w.Name, err)
	}
	return nil
}

// fileOf names the file of t for error messages.
func fileOf(m formats.Model, t *formats.Tensor) string {
	if t.File != "" {
		return t.File
	}
	return m.Path()
}

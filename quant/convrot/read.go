package convrot

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/quant"
)

// Decoder turns rows of a quantized module back into float32 weights. It
// holds the module's scales (read once) and is safe for concurrent use.
type Decoder struct {
	mod     comfyquant.Module
	rows    Int8Rows
	scales  []float32 // per row (INT8 per-row), else one value
	fp8     FP8
	isFP8   bool
	rowSize int64 // bytes per weight row
}

// NewDecoder reads mod's scale tensor from m and returns its decoder.
func NewDecoder(m formats.Model, mod comfyquant.Module) (*Decoder, error) {
	if mod.Unsupported || mod.Scale.Name == "" || len(mod.Weight.Shape) != 2 {
		return nil, fmt.Errorf("%s: module %q: cannot decode format %q (%w)", m.Path(), mod.Name, mod.Config.Format, comfyquant.ErrUnsupportedFormat)
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
	if _, ok := absMax(scales); !ok {
		return nil, fmt.Errorf("%s: tensor %q: a scale is NaN or infinite", file, mod.Scale.Name)
	}
	d := &Decoder{mod: mod, scales: scales, rowSize: mod.Weight.Shape[1]}
	if t, ok := comfyquant.WeightType(mod.Config.Format); ok && t != formats.I8 {
		d.isFP8, d.fp8 = true, FP8{Type: t, Scale: scales[0]}
		return d, nil
	}
	g := 0
	if mod.Config.Convrot {
		g = mod.Config.GroupSize
	}
	if d.rows, err = NewInt8Rows(int(d.rowSize), g); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", fileOf(m, &mod.Weight), mod.Weight.Name, err)
	}
	return d, nil
}

// comfyquant.Module returns the module the decoder reads.
func (d *Decoder) Module() comfyquant.Module { return d.mod }

// Decode turns raw, whole weight rows starting at row first (one byte per
// element), into dst (the same number of elements).
func (d *Decoder) Decode(dst []float32, first int64, raw []byte) error {
	w := &d.mod.Weight
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

// ReadRows reads n weight rows starting at row first from m and decodes them
// into dst (n·in floats).
func (d *Decoder) ReadRows(m formats.Model, first, n int64, dst []float32) error {
	w := &d.mod.Weight
	if int64(len(dst)) != n*d.rowSize {
		return fmt.Errorf("%s: tensor %q: %d floats for %d rows of %d", fileOf(m, w), w.Name, len(dst), n, d.rowSize)
	}
	raw := make([]byte, n*d.rowSize)
	if err := formats.ReadRows(m, w, first, n, raw); err != nil {
		return err
	}
	if err := d.Decode(dst, first, raw); err != nil {
		return fmt.Errorf("%s: %w", fileOf(m, w), err)
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

package comfyquant

import (
	"fmt"
	"slices"

	"github.com/sdtool/sdtool/formats"
)

// Block sizes that fix the scale shapes of the microscaled formats.
const (
	nvfp4Block = 16
	mxfp8Block = 32
	// W4A4KernelGroup is comfy-kitchen's int4 group: convrot_w4a4 rows are
	// a multiple of it.
	W4A4KernelGroup = 64
)

// SwizzledShape is the stored shape of a rows x cols block-scale matrix in
// the cuBLAS tiled layout: rows padded to 128, columns to 4.
func SwizzledShape(rows, cols int64) []int64 {
	return []int64{(rows + 127) / 128 * 128, (cols + 3) / 4 * 4}
}

// completeBlock finds and checks the tensors of an nvfp4, mxfp8,
// convrot_w4a4 or asym_w4a8_int8 module whose weight is mod.Weight.
func completeBlock(m formats.Model, mod *Module, find func(string) (formats.Tensor, bool)) error {
	w := mod.Weight
	file := fileOf(m, &w)
	shape := mod.Shape()
	out, in := shape[0], shape[1]
	c := mod.Config
	need := func(suffix string, types []formats.DType, want []int64) (formats.Tensor, error) {
		name := mod.Name + suffix
		t, ok := find(name)
		if !ok {
			return t, moduleError(file, "", fmt.Sprintf("module %q (%s %s): no tensor %q", mod.Name, mod.Source, c.Format, name))
		}
		if !slices.Contains(types, t.Type) {
			return t, moduleError(fileOf(m, &t), t.Name, fmt.Sprintf("%s needs %v, not %s", c.Format, types, t.Type))
		}
		if n, _ := formats.Elements(want); t.Elements() != n || len(want) > 0 && !sameShape(t.Shape, want) {
			return t, moduleError(fileOf(m, &t), t.Name, fmt.Sprintf("shape %v for weight %v, want %v", t.Shape, w.Shape, want))
		}
		return t, nil
	}
	f32 := []formats.DType{formats.F32}
	var err error
	switch c.Format {
	case FormatNVFP4:
		if out%nvfp4Block != 0 || in%nvfp4Block != 0 {
			return moduleError(file, w.Name, fmt.Sprintf("nvfp4 weight %v: rows and row length must be multiples of %d", shape, nvfp4Block))
		}
		if mod.Scale, err = need(".weight_scale", []formats.DType{formats.F8_E4M3, formats.U8}, SwizzledShape(out, in/nvfp4Block)); err != nil {
			return err
		}
		mod.Scale2, err = need(".weight_scale_2", f32, []int64{})
	case FormatMXFP8:
		if in%mxfp8Block != 0 {
			return moduleError(file, w.Name, fmt.Sprintf("mxfp8 row length %d is not a multiple of %d", in, mxfp8Block))
		}
		mod.Scale, err = need(".weight_scale", []formats.DType{formats.F8_E8M0, formats.U8}, SwizzledShape(out, in/mxfp8Block))
	case FormatW4A4:
		if in%int64(c.GroupSize) != 0 || in%W4A4KernelGroup != 0 {
			return moduleError(file, w.Name, fmt.Sprintf("row length %d is not a multiple of convrot_groupsize %d and of %d", in, c.GroupSize, W4A4KernelGroup))
		}
		mod.Scale, err = need(".weight_scale", f32, []int64{out})
	case FormatW4A8:
		gs := int64(c.QuantGroupSize)
		if in%16 != 0 || in%gs != 0 || in%int64(c.GroupSize) != 0 {
			return moduleError(file, w.Name, fmt.Sprintf("row length %d is not a multiple of 16, group_size %d and convrot_groupsize %d", in, gs, c.GroupSize))
		}
		if mod.Scale, err = need(".weight_s_rel", []formats.DType{formats.F8_E4M3, formats.U8}, []int64{out, in / gs}); err != nil {
			return err
		}
		if mod.Scale2, err = need(".weight_s_channel", f32, []int64{out}); err != nil {
			return err
		}
		if _, ok := find(mod.Name + ".weight_codebook"); ok {
			if mod.Codebook, err = need(".weight_codebook", f32, []int64{16}); err != nil {
				return err
			}
		}
		if _, ok := find(mod.Name + ".weight_correction"); ok {
			mod.Correction, err = need(".weight_correction", []formats.DType{formats.F32, formats.F16, formats.BF16}, []int64{in / gs, out})
		}
	}
	return err
}

// sameShape compares shapes, treating [n] and [n, 1] alike.
func sameShape(a, b []int64) bool {
	if slices.Equal(a, b) {
		return true
	}
	trim := func(s []int64) []int64 {
		if len(s) == 2 && s[1] == 1 {
			return s[:1]
		}
		return s
	}
	return slices.Equal(trim(a), trim(b))
}

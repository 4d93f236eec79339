package comfyquant

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/sdtool/sdtool/formats"
)

// MarshalQuantConfig returns the marker bytes of c, formatted the way
// Python's json.dumps writes them with its default separators (", " and
// ": "), which is what ComfyUI and convert_to_quant store: keys in the order
// format, convrot, convrot_groupsize, full_precision_matrix_mult, the last
// three only when set; the 4-bit ConvRot formats write their group sizes as
// ComfyUI's state_dict does. For example
//
//	{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}
//	{"format": "asym_w4a8_int8", "group_size": 16, "convrot_groupsize": 256}
//	{"format": "convrot_w4a4", "convrot_groupsize": 256}
//	{"format": "int8_tensorwise"}
//	{"format": "float8_e4m3fn"}
func MarshalQuantConfig(c QuantConfig) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"format": "`)
	b.WriteString(c.Format)
	b.WriteByte('"')
	if c.Format == FormatW4A8 {
		// ComfyUI's own state_dict writes group_size, then convrot_groupsize.
		b.WriteString(`, "group_size": `)
		b.WriteString(strconv.Itoa(c.QuantGroupSize))
	}
	if c.Rotated() {
		b.WriteString(`, "convrot_groupsize": `)
		b.WriteString(strconv.Itoa(c.GroupSize))
	}
	if c.LinearDType != "" {
		b.WriteString(`, "linear_dtype": "` + c.LinearDType + `"`)
	}
	if c.Convrot {
		b.WriteString(`, "convrot": true, "convrot_groupsize": `)
		b.WriteString(strconv.Itoa(c.GroupSize))
	}
	if c.FullPrecisionMatMul {
		b.WriteString(`, "full_precision_matrix_mult": true`)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Layout is what a writer stores for one module: its tensors in the
// order they are written, and the bytes of its marker.
type Layout struct {
	// Weight is <m>.weight: I8 or F8 [out, in]; U8 or I8 [out, in/2] for
	// the packed 4-bit formats.
	Weight formats.Tensor
	// Scale is <m>.weight_scale: F32 [out, 1] for INT8, a 0-d F32 scalar
	// for FP8 (as ComfyUI stores tensor-wise scales), the swizzled block
	// scales of nvfp4 (F8_E4M3) and mxfp8 (U8 holding E8M0 codes, which
	// ComfyUI views as float8_e8m0fnu), F32 [out] for convrot_w4a4;
	// <m>.weight_s_rel (F8_E4M3 [out, in/group_size]) for asym_w4a8_int8.
	Scale formats.Tensor
	// Scale2 is nvfp4's <m>.weight_scale_2 (a 0-d F32) or asym_w4a8_int8's
	// <m>.weight_s_channel (F32 [out]); Name is empty for the others.
	Scale2 formats.Tensor
	// Codebook is asym_w4a8_int8's <m>.weight_codebook (F32 [16]).
	Codebook formats.Tensor
	// Marker is <m>.comfy_quant: U8 [len(MarkerData)].
	Marker formats.Tensor
	// MarkerData is the marker's JSON, as MarshalQuantConfig writes it.
	MarkerData []byte
}

// NewLayout returns the tensors of module (the weight's name without
// ".weight") for an [out, in] weight stored as c. The descriptors carry
// name, type, shape and size; File and Offset are left to the writer.
func NewLayout(module string, out, in int64, c QuantConfig) (Layout, error) {
	if module == "" || out <= 0 || in <= 0 {
		return Layout{}, fmt.Errorf("comfyquant: module %q with a [%d, %d] weight", module, out, in)
	}
	marker, err := MarshalQuantConfig(c)
	if err != nil {
		return Layout{}, fmt.Errorf("module %q: %w", module, err)
	}
	wtype, _ := WeightType(c.Format)
	l := Layout{MarkerData: marker}
	if err := l.fill(module, out, in, c, wtype); err != nil {
		return Layout{}, err
	}
	if l.Marker, err = descriptor(module+MarkerSuffix, formats.U8, []int64{int64(len(marker))}); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// fill lays out the weight and scale tensors of c.
func (l *Layout) fill(module string, out, in int64, c QuantConfig, wtype formats.DType) error {
	wshape, stype, sname, sshape := []int64{out, in}, formats.F32, ".weight_scale", []int64{}
	if Packed(c.Format) {
		if in%2 != 0 {
			return fmt.Errorf("comfyquant: module %q: %s needs an even row length, not %d", module, c.Format, in)
		}
		wshape = []int64{out, in / 2}
	}
	switch c.Format {
	case FormatInt8:
		sshape = []int64{out, 1}
	case FormatNVFP4:
		stype, sshape = formats.F8_E4M3, SwizzledShape(out, in/nvfp4Block)
	case FormatMXFP8:
		stype, sshape = formats.U8, SwizzledShape(out, in/mxfp8Block)
	case FormatW4A4:
		sshape = []int64{out}
	case FormatW4A8:
		stype, sname, sshape = formats.F8_E4M3, ".weight_s_rel", []int64{out, in / int64(c.QuantGroupSize)}
	}
	var err error
	if l.Weight, err = descriptor(module+".weight", wtype, wshape); err != nil {
		return err
	}
	if l.Scale, err = descriptor(module+sname, stype, sshape); err != nil {
		return err
	}
	switch c.Format {
	case FormatNVFP4:
		l.Scale2, err = descriptor(module+".weight_scale_2", formats.F32, []int64{})
	case FormatW4A8:
		if l.Scale2, err = descriptor(module+".weight_s_channel", formats.F32, []int64{out}); err != nil {
			return err
		}
		l.Codebook, err = descriptor(module+".weight_codebook", formats.F32, []int64{16})
	}
	return err
}

// Tensors returns the module's descriptors in write order: weight, its
// scales (weight_scale, weight_scale_2; or weight_s_rel, weight_s_channel,
// weight_codebook), comfy_quant.
func (l *Layout) Tensors() []formats.Tensor {
	out := []formats.Tensor{l.Weight, l.Scale}
	for _, t := range []formats.Tensor{l.Scale2, l.Codebook} {
		if t.Name != "" {
			out = append(out, t)
		}
	}
	return append(out, l.Marker)
}

// descriptor builds an output descriptor with its size.
func descriptor(name string, t formats.DType, shape []int64) (formats.Tensor, error) {
	size, err := t.Bytes(shape)
	if err != nil {
		return formats.Tensor{}, fmt.Errorf("tensor %q: %v", name, err)
	}
	return formats.Tensor{Name: name, Type: t, Shape: shape, Size: size}, nil
}

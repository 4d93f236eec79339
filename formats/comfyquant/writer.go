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
// three only when set. For example
//
//	{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}
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

// Layout is what a writer stores for one module: its three tensors in the
// order they are written, and the bytes of its marker.
type Layout struct {
	// Weight is <m>.weight: I8 or F8 [out, in].
	Weight formats.Tensor
	// Scale is <m>.weight_scale: F32 [out, 1] for INT8, a 0-d F32 scalar
	// for FP8 (as ComfyUI stores tensor-wise scales).
	Scale formats.Tensor
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
	scale := []int64{out, 1}
	if c.Format != FormatInt8 {
		scale = []int64{}
	}
	l := Layout{MarkerData: marker}
	if l.Weight, err = descriptor(module+".weight", wtype, []int64{out, in}); err != nil {
		return Layout{}, err
	}
	if l.Scale, err = descriptor(module+".weight_scale", formats.F32, scale); err != nil {
		return Layout{}, err
	}
	if l.Marker, err = descriptor(module+MarkerSuffix, formats.U8, []int64{int64(len(marker))}); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// Tensors returns the module's descriptors in write order: weight,
// weight_scale, comfy_quant.
func (l *Layout) Tensors() []formats.Tensor {
	return []formats.Tensor{l.Weight, l.Scale, l.Marker}
}

// descriptor builds an output descriptor with its size.
func descriptor(name string, t formats.DType, shape []int64) (formats.Tensor, error) {
	size, err := t.Bytes(shape)
	if err != nil {
		return formats.Tensor{}, fmt.Errorf("tensor %q: %v", name, err)
	}
	return formats.Tensor{Name: name, Type: t, Shape: shape, Size: size}, nil
}

package convrot

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// Type is a quantization sdtool can write in ComfyUI's comfy_quant layout.
type Type int

// The types, by their sdtool names (ParseType, String).
const (
	// Int8Convrot is INT8 with a Hadamard rotation per group of input columns
	// (plain INT8 for a layer whose row length the group does not divide).
	Int8Convrot Type = iota + 1
	// Int8 is INT8 with one scale per row, no rotation.
	Int8
	// FP8E4M3 is float8_e4m3fn with a tensor-wise scale.
	FP8E4M3
	// FP8E5M2 is float8_e5m2 with a tensor-wise scale.
	FP8E5M2
)

var typeNames = map[Type]string{Int8Convrot: "int8_convrot", Int8: "int8", FP8E4M3: "fp8_e4m3", FP8E5M2: "fp8_e5m2"}

// String returns the sdtool name of t ("int8_convrot"), or "Type(N)".
func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// ParseType finds a type by its sdtool name, case-insensitively.
func ParseType(name string) (Type, error) {
	for t, s := range typeNames {
		if strings.EqualFold(s, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("convrot: unknown type %q (want int8_convrot, int8, fp8_e4m3 or fp8_e5m2)", name)
}

// Types lists the types in a fixed order, for help texts.
func Types() []Type { return []Type{Int8Convrot, Int8, FP8E4M3, FP8E5M2} }

// Options chooses the output of PlanModule.
type Options struct {
	// Type is the quantization.
	Type Type
	// GroupSize is the rotation group size for Int8Convrot; 0 means
	// DefaultGroupSize. Other types ignore it.
	GroupSize int
	// FullPrecisionMatMul sets "full_precision_matrix_mult" in the marker.
	FullPrecisionMatMul bool
}

// Plan describes how one linear weight is written.
type Plan struct {
	// Module is the module prefix: the weight's name without ".weight".
	Module string
	// Source is the input weight descriptor.
	Source formats.Tensor
	// Type is the requested type.
	Type Type
	// Config is the marker content; Config.Convrot reports whether the
	// rotation applies (false for Int8Convrot when the group does not divide
	// the row length).
	Config QuantConfig
	// Marker is the JSON stored in the comfy_quant tensor.
	Marker []byte
	// Weight, Scale and MarkerTensor are the output descriptors (name, type,
	// shape and size; no file or offset), in the order they are written.
	Weight, Scale, MarkerTensor formats.Tensor
	// Note explains a fallback, e.g. "in=320 not divisible by 256: plain
	// int8"; empty when the request applied as asked.
	Note string
}

// Outputs returns the output descriptors in write order: weight,
// weight_scale, comfy_quant.
func (p *Plan) Outputs() []formats.Tensor {
	return []formats.Tensor{p.Weight, p.Scale, p.MarkerTensor}
}

// Rows returns the row quantizer of an INT8 plan.
func (p *Plan) Rows() (Int8Rows, error) {
	if p.Config.Format != FormatInt8 {
		return Int8Rows{}, fmt.Errorf("convrot: module %q is %s, not INT8", p.Module, p.Config.Format)
	}
	return NewInt8Rows(int(p.Source.Shape[1]), p.Config.GroupSize)
}

// PlanModule returns the output tensors for a linear weight w (named
// "<m>.weight", shape [out, in]): <m>.weight as I8 or F8 [out, in],
// <m>.weight_scale as F32 [out, 1] (INT8) or a 0-d F32 scalar (FP8, as
// ComfyUI stores tensor-wise scales), and <m>.comfy_quant as U8
// [len(marker)]. A row length that the group size does not divide turns
// Int8Convrot into plain INT8 and says so in Note.
func PlanModule(w formats.Tensor, opt Options) (Plan, error) {
	name, ok := strings.CutSuffix(w.Name, ".weight")
	if !ok || name == "" {
		return Plan{}, fmt.Errorf("tensor %q: not a module weight (the name must end in \".weight\")", w.Name)
	}
	if len(w.Shape) != 2 || w.Shape[0] <= 0 || w.Shape[1] <= 0 {
		return Plan{}, fmt.Errorf("tensor %q: shape %v is not a 2-D [out, in] linear weight", w.Name, w.Shape)
	}
	out, in := w.Shape[0], w.Shape[1]
	p := Plan{Module: name, Source: w, Type: opt.Type}
	c := QuantConfig{FullPrecisionMatMul: opt.FullPrecisionMatMul}
	wtype := formats.I8
	scaleShape := []int64{out, 1}
	switch opt.Type {
	case Int8Convrot:
		c.Format = FormatInt8
		g := opt.GroupSize
		if g == 0 {
			g = DefaultGroupSize
		}
		if err := CheckGroupSize(g); err != nil {
			return Plan{}, fmt.Errorf("tensor %q: %w", w.Name, err)
		}
		if in%int64(g) == 0 {
			c.Convrot, c.GroupSize = true, g
		} else {
			p.Note = fmt.Sprintf("in=%d not divisible by %d: plain int8", in, g)
		}
	case Int8:
		c.Format = FormatInt8
	case FP8E4M3:
		c.Format, wtype, scaleShape = FormatFP8E4M3, formats.F8_E4M3, []int64{}
	case FP8E5M2:
		c.Format, wtype, scaleShape = FormatFP8E5M2, formats.F8_E5M2, []int64{}
	default:
		return Plan{}, fmt.Errorf("tensor %q: unknown convrot type %d", w.Name, int(opt.Type))
	}
	marker, err := MarshalQuantConfig(c)
	if err != nil {
		return Plan{}, fmt.Errorf("tensor %q: %w", w.Name, err)
	}
	p.Config, p.Marker = c, marker
	if p.Weight, err = descriptor(name+".weight", wtype, []int64{out, in}); err != nil {
		return Plan{}, err
	}
	if p.Scale, err = descriptor(name+".weight_scale", formats.F32, scaleShape); err != nil {
		return Plan{}, err
	}
	if p.MarkerTensor, err = descriptor(name+MarkerSuffix, formats.U8, []int64{int64(len(marker))}); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// descriptor builds an output descriptor with its size.
func descriptor(name string, t formats.DType, shape []int64) (formats.Tensor, error) {
	size, err := t.Bytes(shape)
	if err != nil {
		return formats.Tensor{}, fmt.Errorf("tensor %q: %v", name, err)
	}
	return formats.Tensor{Name: name, Type: t, Shape: shape, Size: size}, nil
}

// Encode quantizes a whole weight (out·in floats, row-major) as the plan
// says and returns the bytes of the weight and weight_scale tensors (the
// marker's bytes are p.Marker). w is overwritten (rotated or scaled). It
// holds the whole tensor, so it suits small layers and tests; a streaming
// writer uses Rows (INT8) or AbsMax and NewFP8 (FP8) on chunks of rows.
func (p *Plan) Encode(w []float32) (weight, scale []byte, err error) {
	out, in := p.Source.Shape[0], p.Source.Shape[1]
	if int64(len(w)) != out*in {
		return nil, nil, fmt.Errorf("tensor %q: %d values for shape [%d, %d]", p.Source.Name, len(w), out, in)
	}
	weight = make([]byte, len(w))
	if t, ok := formatType(p.Config.Format); ok {
		amax, err := AbsMax(w)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", p.Source.Name, err)
		}
		f, err := NewFP8(t, amax)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", p.Source.Name, err)
		}
		if err := f.Encode(weight, w); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", p.Source.Name, err)
		}
		return weight, PutScales(nil, []float32{f.Scale}), nil
	}
	q, err := p.Rows()
	if err != nil {
		return nil, nil, err
	}
	scales := make([]float32, out)
	if err := q.Quantize(weight, scales, w); err != nil {
		return nil, nil, fmt.Errorf("tensor %q: %w", p.Source.Name, err)
	}
	return weight, PutScales(nil, scales), nil
}

// PutScales appends scales to dst as little-endian F32 values, the bytes of
// a weight_scale tensor.
func PutScales(dst []byte, scales []float32) []byte {
	for _, s := range scales {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(s))
	}
	return dst
}

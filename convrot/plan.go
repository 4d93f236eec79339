package convrot

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
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
	// NVFP4 is ComfyUI's nvfp4: E2M1 with FP8 scales per 16 and a tensor scale.
	NVFP4
	// MXFP8 is ComfyUI's mxfp8: float8_e4m3fn with E8M0 scales per 32.
	MXFP8
	// W4A4 is ComfyUI's convrot_w4a4: rotated signed 4-bit, a scale per row.
	W4A4
	// W4A8 is ComfyUI's asym_w4a8_int8: rotated 4-bit codebook indices with
	// FP8 group scales and an F32 channel scale.
	W4A8
)

var typeNames = map[Type]string{Int8Convrot: "int8_convrot", Int8: "int8", FP8E4M3: "fp8_e4m3", FP8E5M2: "fp8_e5m2",
	NVFP4: "nvfp4", MXFP8: "mxfp8", W4A4: "convrot_w4a4", W4A8: "asym_w4a8_int8"}

// typeAliases are other names users write for the 4-bit ConvRot types.
var typeAliases = map[string]Type{"w4a4": W4A4, "int4_convrot": W4A4, "w4a8": W4A8, "w4a8_int8": W4A8}

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
	if t, ok := typeAliases[strings.ToLower(name)]; ok {
		return t, nil
	}
	return 0, fmt.Errorf("convrot: unknown type %q (want one of %s)", name, strings.Join(Names(), ", "))
}

// Types lists the types in a fixed order, for help texts.
func Types() []Type {
	return []Type{Int8Convrot, Int8, FP8E4M3, FP8E5M2, NVFP4, MXFP8, W4A4, W4A8}
}

// Names lists the names of Types, in the same order.
func Names() []string {
	var out []string
	for _, t := range Types() {
		out = append(out, t.String())
	}
	return out
}

// TypeName names a ComfyUI quantization config the way `sdtool quantize
// --type` does ("int8_convrot", "int8", "fp8_e4m3", "fp8_e5m2"), or by its
// format for the others.
func TypeName(c comfyquant.QuantConfig) string {
	switch c.Format {
	case comfyquant.FormatInt8:
		if c.Convrot {
			return Int8Convrot.String()
		}
		return Int8.String()
	case comfyquant.FormatFP8E4M3:
		return FP8E4M3.String()
	case comfyquant.FormatFP8E5M2:
		return FP8E5M2.String()
	}
	return c.Format // nvfp4, mxfp8, convrot_w4a4, asym_w4a8_int8: sdtool uses ComfyUI's names
}

// Options chooses the output of NewLayer.
type Options struct {
	// Type is the quantization.
	Type Type
	// GroupSize is the rotation group size for Int8Convrot; 0 means
	// comfyquant.DefaultGroupSize. Other types ignore it.
	GroupSize int
	// FullPrecisionMatMul sets "full_precision_matrix_mult" in the marker.
	FullPrecisionMatMul bool
}

// Layer says how one linear weight is written in ComfyUI's layout: its
// marker config, its output tensors and the codec that fills them.
type Layer struct {
	// Module is the module prefix: the weight's name without ".weight".
	Module string
	// Source is the input weight descriptor.
	Source formats.Tensor
	// Type is the requested type.
	Type Type
	// Config is the marker content; Config.Convrot reports whether the
	// rotation applies (false for Int8Convrot when the group does not divide
	// the row length).
	Config comfyquant.QuantConfig
	// Layout holds the output descriptors (weight, weight_scale,
	// comfy_quant; name, type, shape and size) and the marker's bytes.
	comfyquant.Layout
	// Note explains a fallback, e.g. "in=320 not divisible by 256: plain
	// int8"; empty when the request applied as asked.
	Note string
	// Keep reports a weight the type cannot hold (a row length or row
	// count the format's blocks do not divide); Note says why, and the
	// writer keeps the weight in float.
	Keep bool
}

// Rows returns the row quantizer of an INT8 layer.
func (p *Layer) Rows() (Int8Rows, error) {
	if p.Config.Format != comfyquant.FormatInt8 {
		return Int8Rows{}, fmt.Errorf("convrot: module %q is %s, not INT8", p.Module, p.Config.Format)
	}
	return NewInt8Rows(int(p.Source.Shape[1]), p.Config.GroupSize)
}

// NewLayer returns how the linear weight w (named "<m>.weight", shape
// [out, in]) is written as opt.Type: the tensors comfyquant.NewLayout lays
// out for its config. A row length that the group size does not divide
// turns Int8Convrot into plain INT8 and says so in Note.
func NewLayer(w formats.Tensor, opt Options) (Layer, error) {
	name, ok := strings.CutSuffix(w.Name, ".weight")
	if !ok || name == "" {
		return Layer{}, fmt.Errorf("tensor %q: not a module weight (the name must end in \".weight\")", w.Name)
	}
	if len(w.Shape) != 2 || w.Shape[0] <= 0 || w.Shape[1] <= 0 {
		return Layer{}, fmt.Errorf("tensor %q: shape %v is not a 2-D [out, in] linear weight", w.Name, w.Shape)
	}
	out, in := w.Shape[0], w.Shape[1]
	p := Layer{Module: name, Source: w, Type: opt.Type}
	c := comfyquant.QuantConfig{FullPrecisionMatMul: opt.FullPrecisionMatMul}
	switch opt.Type {
	case Int8Convrot:
		c.Format = comfyquant.FormatInt8
		g := opt.GroupSize
		if g == 0 {
			g = comfyquant.DefaultGroupSize
		}
		if err := comfyquant.CheckGroupSize(g); err != nil {
			return Layer{}, fmt.Errorf("tensor %q: %w", w.Name, err)
		}
		if in%int64(g) == 0 {
			c.Convrot, c.GroupSize = true, g
		} else {
			p.Note = fmt.Sprintf("in=%d not divisible by %d: plain int8", in, g)
		}
	case Int8:
		c.Format = comfyquant.FormatInt8
	case FP8E4M3:
		c.Format = comfyquant.FormatFP8E4M3
	case FP8E5M2:
		c.Format = comfyquant.FormatFP8E5M2
	case NVFP4, MXFP8, W4A4, W4A8:
		if !p.blockConfig(&c, out, in, opt.GroupSize) {
			return p, nil
		}
	default:
		return Layer{}, fmt.Errorf("tensor %q: unknown convrot type %d", w.Name, int(opt.Type))
	}
	l, err := comfyquant.NewLayout(name, out, in, c)
	if err != nil {
		return Layer{}, fmt.Errorf("tensor %q: %w", w.Name, err)
	}
	p.Config, p.Layout = c, l
	return p, nil
}

// Encode quantizes a whole weight (out·in floats, row-major) as the layer
// says and returns the bytes of the weight and weight_scale tensors (the
// marker's bytes are MarkerData). w is overwritten (rotated or scaled). It
// holds the whole tensor, so it suits small layers and tests; a streaming
// writer uses Rows (INT8) or AbsMax and NewFP8 (FP8) on chunks of rows.
func (p *Layer) Encode(w []float32) (weight, scale []byte, err error) {
	out, in := p.Source.Shape[0], p.Source.Shape[1]
	if int64(len(w)) != out*in {
		return nil, nil, fmt.Errorf("tensor %q: %d values for shape [%d, %d]", p.Source.Name, len(w), out, in)
	}
	weight = make([]byte, len(w))
	if t, ok := comfyquant.WeightType(p.Config.Format); ok && t != formats.I8 {
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

package comfyquant

import (
	"fmt"
	"math/bits"
	"strconv"

	"github.com/sdtool/sdtool/formats"
)

// The comfy_quant formats this package reads and writes.
const (
	// FormatInt8 is INT8 weights with an F32 scale per row ([out, 1]) or per
	// tensor (a scalar); with convrot the rows are Hadamard-rotated.
	FormatInt8 = "int8_tensorwise"
	// FormatFP8E4M3 is float8_e4m3fn weights with a tensor-wise F32 scale.
	FormatFP8E4M3 = "float8_e4m3fn"
	// FormatFP8E5M2 is float8_e5m2 weights with a tensor-wise F32 scale.
	FormatFP8E5M2 = "float8_e5m2"
	// FormatNVFP4 is E2M1 weights packed two per byte (U8 [out, in/2]) with
	// an FP8 E4M3 scale per 16 values (weight_scale, swizzled) and an F32
	// tensor scale (weight_scale_2).
	FormatNVFP4 = "nvfp4"
	// FormatMXFP8 is float8_e4m3fn weights with an E8M0 scale per 32 values
	// (weight_scale, swizzled).
	FormatMXFP8 = "mxfp8"
	// FormatW4A4 is ConvRot-rotated signed 4-bit weights packed two per
	// byte (I8 [out, in/2]) with an F32 scale per row.
	FormatW4A4 = "convrot_w4a4"
	// FormatW4A8 is ConvRot-rotated 4-bit codebook indices packed two per
	// byte (I8 [out, in/2]), an FP8 scale per group (weight_s_rel), an F32
	// scale per row (weight_s_channel) and the 16 levels (weight_codebook).
	FormatW4A8 = "asym_w4a8_int8"
)

// MarkerSuffix ends the name of the U8 tensor that holds a module's
// comfy_quant JSON (the module prefix has no ".weight").
const MarkerSuffix = ".comfy_quant"

// MaxMarkerSize bounds the bytes of a comfy_quant marker sdtool will read;
// real markers are under 200 bytes.
const MaxMarkerSize = 64 << 10

// Errors of the reader and writer, for errors.Is.
var (
	// ErrConfig is wrapped by every error about a malformed comfy_quant
	// marker or module; it wraps formats.ErrFormat.
	ErrConfig = formats.Sentinel("comfyquant: invalid comfy_quant marker", formats.ErrFormat)
	// ErrUnsupportedFormat is wrapped when a well-formed marker names a
	// format this package cannot decode (nvfp4, mxfp8, convrot_w4a4, ...),
	// so a caller can choose to copy such a module unchanged; it wraps
	// formats.ErrFormat.
	ErrUnsupportedFormat = formats.Sentinel("comfyquant: unsupported comfy_quant format", formats.ErrFormat)
	// ErrGroupSize is wrapped by every error about an invalid rotation
	// group size, whether a marker or a user option gives it.
	ErrGroupSize = formats.Sentinel("comfyquant: invalid convrot group size", nil)
)

// QuantConfig is the content of a comfy_quant marker.
type QuantConfig struct {
	// Format is one of the Format constants.
	Format string
	// Convrot reports INT8 weights rotated by H_GroupSize.
	Convrot bool
	// GroupSize is the rotation group size (convrot_groupsize) when Convrot
	// is set or the format is FormatW4A4 or FormatW4A8 (always rotated),
	// else 0.
	GroupSize int
	// QuantGroupSize is FormatW4A8's group_size (values per relative
	// scale), else 0.
	QuantGroupSize int
	// LinearDType is FormatW4A4's linear_dtype when it is not the default
	// "int4" (ComfyUI also knows "int8"), else "".
	LinearDType string
	// FullPrecisionMatMul is ComfyUI's "full_precision_matrix_mult": the
	// loader dequantizes before the product instead of using INT8/FP8 kernels.
	FullPrecisionMatMul bool
	// Unknown lists, sorted, the keys the parser did not interpret
	// (convert_to_quant's "per_row", future options). Marshal drops them.
	Unknown []string
}

// String describes c for listings: "int8_tensorwise convrot G=256",
// "float8_e4m3fn full_precision_matrix_mult".
func (c QuantConfig) String() string {
	s := c.Format
	if c.Convrot || c.Rotated() {
		s += " convrot G=" + strconv.Itoa(c.GroupSize)
	}
	if c.QuantGroupSize != 0 {
		s += " group " + strconv.Itoa(c.QuantGroupSize)
	}
	if c.LinearDType != "" {
		s += " linear " + c.LinearDType
	}
	if c.FullPrecisionMatMul {
		s += " full_precision_matrix_mult"
	}
	return s
}

// Rotated reports a format whose weights are always Hadamard-rotated
// (convrot_w4a4, asym_w4a8_int8), apart from INT8 with Convrot set.
func (c QuantConfig) Rotated() bool { return c.Format == FormatW4A4 || c.Format == FormatW4A8 }

// knownFormats are the formats this package decodes.
var knownFormats = map[string]struct{}{FormatInt8: {}, FormatFP8E4M3: {}, FormatFP8E5M2: {},
	FormatNVFP4: {}, FormatMXFP8: {}, FormatW4A4: {}, FormatW4A8: {}}

// validate checks the combination of fields.
func (c QuantConfig) validate() error {
	if _, ok := knownFormats[c.Format]; !ok {
		return fmt.Errorf("%w %q", ErrUnsupportedFormat, c.Format)
	}
	if c.QuantGroupSize != 0 && c.Format != FormatW4A8 {
		return fmt.Errorf("%w: group_size %d for format %q", ErrConfig, c.QuantGroupSize, c.Format)
	}
	if c.LinearDType != "" && (c.Format != FormatW4A4 || c.LinearDType != "int8") {
		return fmt.Errorf("%w: linear_dtype %q for format %q (convrot_w4a4 takes int4 or int8)", ErrConfig, c.LinearDType, c.Format)
	}
	if c.Rotated() {
		if c.Convrot {
			return fmt.Errorf("%w: format %q is always rotated; \"convrot\" applies to %q", ErrConfig, c.Format, FormatInt8)
		}
		if err := CheckGroupSize(c.GroupSize); err != nil {
			return fmt.Errorf("%w: convrot_groupsize: %w", ErrConfig, err)
		}
		if g := c.QuantGroupSize; c.Format == FormatW4A8 && (g < 4 || 16%g != 0 && g%16 != 0) {
			return fmt.Errorf("%w: group_size %d must be at least 4 and divide 16 or be a multiple of 16", ErrConfig, g)
		}
		return nil
	}
	if c.Convrot {
		if c.Format != FormatInt8 {
			return fmt.Errorf("%w: convrot needs format %q, not %q", ErrConfig, FormatInt8, c.Format)
		}
		if err := CheckGroupSize(c.GroupSize); err != nil {
			return fmt.Errorf("%w: convrot_groupsize: %w", ErrConfig, err)
		}
	} else if c.GroupSize != 0 {
		return fmt.Errorf("%w: group size %d without convrot", ErrConfig, c.GroupSize)
	}
	return nil
}

// Where a module's quantization settings came from (Module.Source).
const (
	// SourceMarker is a <m>.comfy_quant tensor.
	SourceMarker = "comfy_quant"
	// SourceMetadata is the safetensors __metadata__ entry
	// "_quantization_metadata" ({"format_version": ..., "layers": {...}}).
	SourceMetadata = "_quantization_metadata"
	// SourceScaledFP8 is the legacy layout: a tensor named "scaled_fp8" in
	// the file (a writer that dequantizes drops it too) and <m>.scale_weight
	// (and <m>.scale_input) beside FP8 weights.
	SourceScaledFP8 = "scaled_fp8"
)

// Module is one quantized linear layer found by Detect.
type Module struct {
	// Name is the module prefix ("double_blocks.0.img_attn.qkv").
	Name string
	// Config holds the quantization settings.
	Config QuantConfig
	// Source says where Config came from: SourceMarker, SourceMetadata or SourceScaledFP8.
	Source string
	// Weight is the I8 or F8 weight, [out, in].
	Weight formats.Tensor
	// Scale is the weight scale: [out, 1], [out] or a single element; the
	// swizzled block scales of nvfp4 and mxfp8; weight_s_rel of asym_w4a8_int8.
	Scale formats.Tensor
	// Scale2 is nvfp4's weight_scale_2 (tensor scale) or asym_w4a8_int8's
	// weight_s_channel; its Name is empty for the other formats.
	Scale2 formats.Tensor
	// Codebook is asym_w4a8_int8's weight_codebook and Correction its
	// weight_correction (ComfyUI's loader ignores the latter); a Name is
	// empty when the file has none.
	Codebook, Correction formats.Tensor
	// Marker is the comfy_quant tensor; its Name is empty when Source is not SourceMarker.
	Marker formats.Tensor
	// InputScale is the optional activation scale (.input_scale or the
	// legacy .scale_input); its Name is empty when there is none.
	InputScale formats.Tensor
	// Unsupported reports a well-formed marker whose format this package
	// cannot decode (nvfp4, mxfp8, convrot_w4a4, ...): only Name,
	// Config.Format, Source and Marker are set, and a writer can copy the
	// module's tensors unchanged or refuse it.
	Unsupported bool
}

// Aux returns the names of the module's tensors other than the weight
// (scale, marker, input scale): a writer that dequantizes the module to
// floats drops them. For an unsupported module it is the marker alone.
func (m *Module) Aux() []string {
	var out []string
	for _, t := range []formats.Tensor{m.Scale, m.Scale2, m.Codebook, m.Correction, m.Marker, m.InputScale} {
		if t.Name != "" {
			out = append(out, t.Name)
		}
	}
	return out
}

// DefaultGroupSize is the rotation group size ComfyUI and convert_to_quant use
// unless told otherwise.
const DefaultGroupSize = 256

// MaxGroupSize is the largest group size sdtool accepts (4^8): larger
// groups bring nothing and would only make a bad marker expensive.
const MaxGroupSize = 1 << 16

// CheckGroupSize reports whether g is a power of four between 4 and
// MaxGroupSize; 512 and other powers of two that are not powers of four are
// refused because ComfyUI's kitchen refuses them. The error wraps
// ErrGroupSize.
func CheckGroupSize(g int) error {
	switch {
	case g < 4 || g > MaxGroupSize:
		return groupSizeError(fmt.Sprintf("group size %d is outside [4, %d]", g, MaxGroupSize))
	case g&(g-1) != 0:
		return groupSizeError(fmt.Sprintf("group size %d is not a power of four", g))
	case bits.TrailingZeros(uint(g))%2 != 0:
		return groupSizeError(fmt.Sprintf("group size %d is a power of two but not of four (ComfyUI accepts 4, 16, 64, 256, 1024, ...)", g))
	}
	return nil
}

// groupSizeError says what is wrong with a group size; it wraps ErrGroupSize.
type groupSizeError string

func (e groupSizeError) Error() string { return string(e) }
func (e groupSizeError) Unwrap() error { return ErrGroupSize }

// WeightType returns the dtype of a module's weight in format, ComfyUI's
// storage type: F8_E4M3 or F8_E5M2 for the FP8 formats and mxfp8, U8 for
// nvfp4, I8 for INT8 and the 4-bit ConvRot formats; ok is false for formats
// this package does not know.
func WeightType(format string) (formats.DType, bool) {
	switch format {
	case FormatFP8E4M3, FormatMXFP8:
		return formats.F8_E4M3, true
	case FormatFP8E5M2:
		return formats.F8_E5M2, true
	case FormatInt8, FormatW4A4, FormatW4A8:
		return formats.I8, true
	case FormatNVFP4:
		return formats.U8, true
	}
	return 0, false
}

// Packed reports a format that stores two 4-bit values per weight byte, so
// that the stored weight is [out, in/2].
func Packed(format string) bool {
	return format == FormatNVFP4 || format == FormatW4A4 || format == FormatW4A8
}

// Shape returns the module's logical [out, in] weight shape: the stored
// weight's, with the row length doubled for the packed 4-bit formats.
func (m *Module) Shape() []int64 {
	if len(m.Weight.Shape) != 2 {
		return m.Weight.Shape
	}
	if Packed(m.Config.Format) {
		return []int64{m.Weight.Shape[0], 2 * m.Weight.Shape[1]}
	}
	return m.Weight.Shape
}

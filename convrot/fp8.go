package convrot

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// The largest finite values of the FP8 formats, which the tensor-wise scale
// maps the tensor's largest magnitude onto.
const (
	FP8E4M3Max = 448
	FP8E5M2Max = 57344
)

// AbsMax returns the largest magnitude in rows, the first pass of FP8
// encoding (the tensor-wise scale needs the whole tensor's amax; combine
// chunks with max). It refuses a NaN or an infinity.
func AbsMax(rows []float32) (float32, error) {
	m, ok := absMax(rows)
	if !ok {
		return 0, fmt.Errorf("convrot: a value is NaN or infinite")
	}
	return m, nil
}

// FP8 encodes and decodes tensor-wise scaled FP8 weights: code =
// fp8(clamp(w/Scale, ±max)) with round-to-nearest-even, and w = decode(code)
// ·Scale. Its methods keep no state and are safe for concurrent use.
type FP8 struct {
	// Type is formats.F8_E4M3 (float8_e4m3fn) or formats.F8_E5M2.
	Type formats.DType
	// Scale is the tensor-wise F32 scale stored as weight_scale.
	Scale float32
}

// NewFP8 returns the encoder of type t (F8_E4M3 or F8_E5M2) for a tensor
// whose largest magnitude is amax: Scale = max(amax/448, 1e-30) for e4m3fn
// and max(amax/57344, 1e-30) for e5m2, computed in float32.
func NewFP8(t formats.DType, amax float32) (FP8, error) {
	fmax, err := fp8Max(t)
	if err != nil {
		return FP8{}, err
	}
	if !(amax >= 0) || amax > 0x1p127 {
		return FP8{}, fmt.Errorf("convrot: amax %v is not a finite magnitude", amax)
	}
	s := amax / fmax
	if !(s >= MinScale) {
		s = MinScale
	}
	return FP8{Type: t, Scale: s}, nil
}

// fp8Max returns the largest finite value of t.
func fp8Max(t formats.DType) (float32, error) {
	switch t {
	case formats.F8_E4M3:
		return FP8E4M3Max, nil
	case formats.F8_E5M2:
		return FP8E5M2Max, nil
	}
	return 0, fmt.Errorf("convrot: %s is not an FP8 type ComfyUI scales (f8_e4m3, f8_e5m2)", t)
}

// Encode writes one FP8 code per value of src into dst (len(dst) ==
// len(src)). The division by Scale is a float32 division, and values beyond
// the format's range saturate to ±max, as ComfyUI clamps before its cast. A
// NaN or infinite value is refused.
func (f FP8) Encode(dst []byte, src []float32) error {
	if len(dst) != len(src) {
		return fmt.Errorf("convrot: %d FP8 codes for %d values", len(dst), len(src))
	}
	if _, ok := absMax(src); !ok {
		return fmt.Errorf("convrot: a value is NaN or infinite")
	}
	s := f.Scale
	switch f.Type {
	case formats.F8_E4M3:
		for i, v := range src {
			dst[i] = quant.F32ToF8E4M3(v / s)
		}
	case formats.F8_E5M2:
		for i, v := range src {
			// F32ToF8E5M2 keeps ±Inf, which v/s reaches only when s is
			// tiny and v huge; saturate it like a finite overflow.
			dst[i] = quant.F32ToF8E5M2(min(max(v/s, -FP8E5M2Max), FP8E5M2Max))
		}
	default:
		_, err := fp8Max(f.Type)
		return err
	}
	return nil
}

// Decode writes decode(code)·Scale for each code of src into dst (len(dst)
// == len(src)), in float32.
func (f FP8) Decode(dst []float32, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("convrot: %d values for %d FP8 codes", len(dst), len(src))
	}
	s := f.Scale
	switch f.Type {
	case formats.F8_E4M3:
		for i, c := range src {
			dst[i] = quant.F8E4M3ToF32(c) * s
		}
	case formats.F8_E5M2:
		for i, c := range src {
			dst[i] = quant.F8E5M2ToF32(c) * s
		}
	default:
		_, err := fp8Max(f.Type)
		return err
	}
	return nil
}

package convrot

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sdtool/sdtool/formats/comfyquant"
)

// MinScale is the smallest scale sdtool writes (ComfyUI kitchen's floor), so
// that an all-zero row or tensor never divides by zero; its codes are all 0
// and it dequantizes to exact zeros.
const MinScale = 1e-30

// Int8Max is the largest INT8 code magnitude; -128 is never written so that
// the code range is symmetric.
const Int8Max = 127

// Int8Rows quantizes and dequantizes rows of one [out, in] weight to INT8
// with one F32 scale per row, rotating each group of GroupSize columns by
// H_GroupSize first when GroupSize is not 0. Its methods take chunks of
// whole rows, keep no state and are safe for concurrent use, so a pipeline
// can stream any row range with bounded memory.
type Int8Rows struct {
	// In is the row length (the input features of the layer).
	In int
	// GroupSize is the rotation group size, or 0 for plain per-row INT8.
	GroupSize int
}

// NewInt8Rows checks the row length and group size (0 for no rotation; else a
// power of four that divides in) and returns the quantizer.
func NewInt8Rows(in, groupSize int) (Int8Rows, error) {
	if in <= 0 {
		return Int8Rows{}, fmt.Errorf("convrot: row length %d is not positive", in)
	}
	if groupSize != 0 {
		if err := comfyquant.CheckGroupSize(groupSize); err != nil {
			return Int8Rows{}, err
		}
		if in%groupSize != 0 {
			return Int8Rows{}, fmt.Errorf("convrot: row length %d is not divisible by the group size %d", in, groupSize)
		}
	}
	return Int8Rows{In: in, GroupSize: groupSize}, nil
}

// rows checks that the buffers hold the same whole number of rows and
// returns it; scales < 0 skips the scale count check.
func (q Int8Rows) rows(floats, codes, scales int) (int, error) {
	if q.In <= 0 {
		return 0, fmt.Errorf("convrot: row length %d is not positive", q.In)
	}
	if floats%q.In != 0 {
		return 0, fmt.Errorf("convrot: %d values are not a whole number of rows of %d", floats, q.In)
	}
	n := floats / q.In
	if codes != floats || scales >= 0 && scales != n {
		return 0, fmt.Errorf("convrot: %d rows of %d need %d codes and %d scales, got %d and %d",
			n, q.In, floats, n, codes, scales)
	}
	return n, nil
}

// Quantize encodes whole rows of rows (n·In values) into codes (n·In bytes,
// two's-complement I8 as stored in safetensors) and scales (n values; nil
// when the caller writes the scales separately, see ScaleBytes). The
// rotation is done in place, so rows holds the rotated weights afterwards.
// A row with a NaN or an infinity (before or after rotation) is refused with
// an error that gives its index within the chunk.
func (q Int8Rows) Quantize(codes []byte, scales []float32, rows []float32) error {
	ns := len(scales)
	if scales == nil {
		ns = -1
	}
	n, err := q.rows(len(rows), len(codes), ns)
	if err != nil {
		return err
	}
	for r := 0; r < n; r++ {
		row := rows[r*q.In : (r+1)*q.In : (r+1)*q.In]
		s, err := q.rowScale(row, r)
		if err != nil {
			return err
		}
		if scales != nil {
			scales[r] = s
		}
		encodeInt8(codes[r*q.In:(r+1)*q.In:(r+1)*q.In], row, s)
	}
	return nil
}

// Scales computes only the per-row scales of rows (rotating them in place),
// for a writer that emits the weight_scale tensor separately from the codes.
// The scales equal those Quantize returns.
func (q Int8Rows) Scales(scales []float32, rows []float32) error {
	n, err := q.rows(len(rows), len(rows), len(scales))
	if err != nil {
		return err
	}
	for r := 0; r < n; r++ {
		if scales[r], err = q.rowScale(rows[r*q.In:(r+1)*q.In:(r+1)*q.In], r); err != nil {
			return err
		}
	}
	return nil
}

// ScaleBytes is Scales writing the scales as little-endian F32 values into
// dst (4 bytes per row): the bytes of those rows of the weight_scale tensor.
func (q Int8Rows) ScaleBytes(dst []byte, rows []float32) error {
	if q.In <= 0 || len(rows)%q.In != 0 || len(dst) != 4*(len(rows)/q.In) {
		return fmt.Errorf("convrot: %d bytes of scales for %d values in rows of %d", len(dst), len(rows), q.In)
	}
	for r := 0; r < len(dst)/4; r++ {
		s, err := q.rowScale(rows[r*q.In:(r+1)*q.In:(r+1)*q.In], r)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(dst[4*r:], math.Float32bits(s))
	}
	return nil
}

// rowScale rotates one row in place (when GroupSize is set) and returns its scale.
func (q Int8Rows) rowScale(row []float32, r int) (float32, error) {
	if q.GroupSize != 0 {
		if err := Rotate(row, q.GroupSize); err != nil {
			return 0, err
		}
	}
	amax, ok := absMax(row)
	if !ok {
		return 0, fmt.Errorf("convrot: row %d holds a NaN or infinite value", r)
	}
	return RowScale(amax), nil
}

// Dequantize decodes whole rows: dst = codes·scale per row in float32, then
// the rotation again (H·H = I) when GroupSize is not 0.
func (q Int8Rows) Dequantize(dst []float32, codes []byte, scales []float32) error {
	n, err := q.rows(len(dst), len(codes), len(scales))
	if err != nil {
		return err
	}
	for r := 0; r < n; r++ {
		row := dst[r*q.In : (r+1)*q.In : (r+1)*q.In]
		src := codes[r*q.In : (r+1)*q.In : (r+1)*q.In]
		s := scales[r]
		for i, c := range src {
			row[i] = float32(int8(c)) * s
		}
		if q.GroupSize != 0 {
			if err := Rotate(row, q.GroupSize); err != nil {
				return err
			}
		}
	}
	return nil
}

// RowScale returns the INT8 scale of a row whose largest magnitude is amax:
// amax/127 in float32, floored at MinScale.
func RowScale(amax float32) float32 {
	s := amax / Int8Max
	if !(s >= MinScale) {
		s = MinScale
	}
	return s
}

// absMax returns the largest |x| of row and false when row holds a NaN or an
// infinity. It compares the bit patterns without the sign, which orders
// finite floats like their magnitudes and puts Inf and NaN above them all.
func absMax(row []float32) (float32, bool) {
	var m uint32
	for _, v := range row {
		b := math.Float32bits(v) &^ (1 << 31)
		if b > m {
			m = b
		}
	}
	return math.Float32frombits(m), m < 0x7f800000
}

// roundMagic is 1.5·2^23: adding it to a float32 of magnitude below 2^22
// leaves a value whose unit in the last place is 1, so the addition rounds
// to an integer, half to even, as IEEE round-to-nearest does.
const roundMagic = 12582912

// encodeInt8 writes clamp(roundHalfEven(x/s), -127, 127) for each x.
func encodeInt8(dst []byte, row []float32, s float32) {
	dst = dst[:len(row)]
	for i, v := range row {
		// |v/s| is at most about 127 (s >= amax/127), far below 2^22, and
		// the conversion to int32 of an integral float is exact.
		r := int32(float32(float32(v/s+roundMagic) - roundMagic))
		dst[i] = byte(int8(min(max(r, -Int8Max), Int8Max)))
	}
}

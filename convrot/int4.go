package convrot

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/sdtool/sdtool/quant"
)

// Constants of the two 4-bit ConvRot formats.
const (
	// Int4Max is the largest code magnitude of convrot_w4a4 (codes -7..7).
	Int4Max = 7
	// W4A4KernelGroup is the group of comfy-kitchen's int4 kernel: a
	// convrot_w4a4 row length must be a multiple of it.
	W4A4KernelGroup = 64
	// W4A8DefaultGroup is asym_w4a8_int8's default group_size (values that
	// share one FP8 relative scale).
	W4A8DefaultGroup = 16
	// w4a8Floor is the reference's floor on group and channel scales.
	w4a8Floor = 1e-8
	// w4a8Refine is the number of least-squares group-scale refinements.
	w4a8Refine = 2
)

// pack4 stores two signed or unsigned 4-bit values per byte, the even
// column in the low nibble (comfy-kitchen's row-major int4 packing).
func pack4(lo, hi int32) byte { return byte(lo&15) | byte(hi&15)<<4 }

// signed4 reads a nibble as a two's-complement value in [-8, 7].
func signed4(n byte) int32 { return int32(int8(n<<4) >> 4) }

// round32 rounds to the nearest integer, ties to even, as torch.round does
// (|x| must be below 2^22).
func round32(x float32) float32 { return float32(x+roundMagic) - roundMagic }

// EncodeW4A4Row rotates one row in place by H_g, then quantizes it to
// convrot_w4a4: scale = max(amax, 1e-10)/7 and codes clamp(round(x/scale),
// ±7), packed two per byte (len(codes) = len(row)/2). It returns the row's
// scale.
func EncodeW4A4Row(codes []byte, row []float32, g int) (float32, error) {
	if len(row)%W4A4KernelGroup != 0 || len(codes)*2 != len(row) {
		return 0, fmt.Errorf("convrot: w4a4 row of %d values (a multiple of %d) needs %d code bytes, got %d", len(row), W4A4KernelGroup, len(row)/2, len(codes))
	}
	if err := Rotate(row, g); err != nil {
		return 0, err
	}
	amax, ok := absMax(row)
	if !ok {
		return 0, fmt.Errorf("convrot: a value is NaN or infinite")
	}
	s := max(amax, 1e-10) / Int4Max
	for i := 0; i < len(row); i += 2 {
		a := min(max(round32(row[i]/s), -Int4Max), Int4Max)
		b := min(max(round32(row[i+1]/s), -Int4Max), Int4Max)
		codes[i/2] = pack4(int32(a), int32(b))
	}
	return s, nil
}

// DecodeW4A4Row decodes one row: code·scale in float32, then H_g again.
func DecodeW4A4Row(dst []float32, codes []byte, scale float32, g int) error {
	if len(codes)*2 != len(dst) {
		return fmt.Errorf("convrot: w4a4 row of %d values needs %d code bytes, got %d", len(dst), len(dst)/2, len(codes))
	}
	for i, c := range codes {
		dst[2*i] = float32(signed4(c&15)) * scale
		dst[2*i+1] = float32(signed4(c>>4)) * scale
	}
	return Rotate(dst, g)
}

// W4A8FixedCodebook is asym_w4a8_int8's default table: the 16 Lloyd-Max
// levels of a group-normalised Gaussian, which ConvRot-rotated weights
// follow (comfy-kitchen's constants).
var W4A8FixedCodebook = [16]float32{
	-0.980602, -0.794529, -0.638165, -0.500986, -0.377321, -0.263187, -0.155210, -0.050720,
	0.052541, 0.156985, 0.265284, 0.379533, 0.502636, 0.638953, 0.794876, 0.980671,
}

// W4A8Quantizer quantizes rotated rows to asym_w4a8_int8 with a codebook: each group
// of GroupSize values gets an FP8 scale relative to the row's float32
// channel scale, and each value the index of a codebook level.
type W4A8Quantizer struct {
	// GroupSize is the values per relative scale (16 by default).
	GroupSize int
	// RotGroup is the Hadamard group (convrot_groupsize, 256 by default).
	RotGroup int
	// Codebook holds the 16 sorted levels (W4A8FixedCodebook or a fit).
	Codebook [16]float32
}

// CheckW4A8Shape reports whether a row of in values suits group size gs and
// rotation group g as comfy-kitchen requires: in a multiple of 16, gs and g;
// gs at least 4 and dividing 16 or a multiple of it.
func CheckW4A8Shape(in, gs, g int) error {
	if gs < 4 || 16%gs != 0 && gs%16 != 0 || in%16 != 0 || in%gs != 0 || in%g != 0 {
		return fmt.Errorf("convrot: w4a8 row length %d must be a multiple of 16, group_size %d and convrot_groupsize %d (group_size at least 4, dividing 16 or a multiple of it)", in, gs, g)
	}
	return nil
}

// nearest returns the index of the level nearest x in the sorted levels:
// the two neighbours of the first level not below x, the lower one on ties
// (torch.searchsorted and the reference's comparison).
func nearest(levels []float32, x float32) int {
	pos := sort.Search(len(levels), func(i int) bool { return levels[i] >= x })
	lo, hi := max(pos-1, 0), min(pos, len(levels)-1)
	if abs32(x-levels[hi]) < abs32(x-levels[lo]) {
		return hi
	}
	return lo
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// EncodeRow quantizes one rotated row: codes gets len(row)/2 bytes (index
// of the even column in the low nibble), sRel one float8_e4m3fn code per
// group. Per group the scale starts at the largest magnitude, the indices
// at the nearest levels of x/scale, then twice the least-squares scale
// Σx·c/Σc² and new indices; the channel scale is the largest decoded
// magnitude over 127; the relative scale is group scale over channel scale
// in FP8; and the final index of each value is the nearest of the group's
// integer levels round(codebook·relative scale) to x/channel scale, the
// grid the INT8 product uses. It returns the channel scale.
func (w W4A8Quantizer) EncodeRow(codes, sRel []byte, row []float32) (float32, error) {
	gs, n := w.GroupSize, len(row)
	if gs <= 0 || n%gs != 0 || n%2 != 0 || len(codes)*2 != n || len(sRel)*gs != n {
		return 0, fmt.Errorf("convrot: w4a8 row of %d values needs %d code bytes and %d scales", n, n/2, n/max(gs, 1))
	}
	if _, ok := absMax(row); !ok {
		return 0, fmt.Errorf("convrot: a value is NaN or infinite")
	}
	cb := w.Codebook[:]
	idx := make([]int, n)
	scales := make([]float32, n/gs)
	var chMax float32
	for g := range n / gs {
		x, q := row[g*gs:(g+1)*gs], idx[g*gs:(g+1)*gs]
		amax, _ := absMax(x)
		s := max(amax, w4a8Floor)
		for j, v := range x {
			q[j] = nearest(cb, v/s)
		}
		for range w4a8Refine {
			var num, den float32
			for j, v := range x {
				num += v * cb[q[j]]
				den += cb[q[j]] * cb[q[j]]
			}
			s = max(num/max(den, w4a8Floor), w4a8Floor)
			for j, v := range x {
				q[j] = nearest(cb, v/s)
			}
		}
		scales[g] = s
		for _, k := range q {
			chMax = max(chMax, abs32(cb[k]*s))
		}
	}
	ch := max(chMax/127, w4a8Floor)
	var levels [16]float32
	for g := range n / gs {
		r := quant.F32ToF8E4M3(scales[g] / ch)
		sRel[g] = r
		rv := quant.F8E4M3ToF32(r)
		for i, c := range cb {
			levels[i] = min(max(round32(c*rv), -127), 127)
		}
		for j := g * gs; j < (g+1)*gs; j++ {
			idx[j] = nearest(levels[:], row[j]/ch)
		}
	}
	for i := 0; i < n; i += 2 {
		codes[i/2] = pack4(int32(idx[i]), int32(idx[i+1]))
	}
	return ch, nil
}

// W4A4Int8Row widens one row of convrot_w4a4 codes (two per byte, the even
// column in the low nibble) to one signed byte each (len(dst) =
// 2·len(codes)): the int4 values ComfyUI's kernel multiplies.
func W4A4Int8Row(dst, codes []byte) {
	for i, c := range codes {
		dst[2*i] = byte(int8(signed4(c & 15)))
		dst[2*i+1] = byte(int8(signed4(c >> 4)))
	}
}

// W4A8Int8Row writes the INT8 codes one row of asym_w4a8_int8 stands for
// (two's complement, one byte per value): clamp(round(level·relative
// scale), ±127), level being codebook[code] or, without a codebook,
// code-8. With the channel scale as the row's scale and the rotation
// group, they are the INT8 convrot module ComfyUI multiplies (W8A8).
func W4A8Int8Row(dst []byte, codes, sRel []byte, codebook []float32, gs int) error {
	n := len(dst)
	if gs <= 0 || n%gs != 0 || len(codes)*2 != n || len(sRel)*gs != n {
		return fmt.Errorf("convrot: w4a8 row of %d values needs %d code bytes and %d scales", n, n/2, n/max(gs, 1))
	}
	for i := range dst {
		c := codes[i/2] >> (4 * (i % 2)) & 15
		level := float32(c) - 8
		if codebook != nil {
			level = codebook[c]
		}
		dst[i] = byte(int8(min(max(round32(level*quant.F8E4M3ToF32(sRel[i/gs])), -127), 127)))
	}
	return nil
}

// DecodeW4A8Row decodes one row of asym_w4a8_int8: the INT8 value of each
// code is clamp(round(level·relative scale), ±127), where level is
// codebook[code] or, without a codebook, code-8; times the channel scale in
// float32, plus the group's correction when there is one (nil: none), then
// H_g again.
func DecodeW4A8Row(dst []float32, codes, sRel []byte, ch float32, codebook []float32, correction []float32, gs, g int) error {
	n := len(dst)
	if gs <= 0 || n%gs != 0 || len(codes)*2 != n || len(sRel)*gs != n || correction != nil && len(correction)*gs != n {
		return fmt.Errorf("convrot: w4a8 row of %d values needs %d code bytes and %d scales", n, n/2, n/max(gs, 1))
	}
	for i := range dst {
		c := codes[i/2] >> (4 * (i % 2)) & 15
		level := float32(c) - 8
		if codebook != nil {
			level = codebook[c]
		}
		v := min(max(round32(level*quant.F8E4M3ToF32(sRel[i/gs])), -127), 127) * ch
		if correction != nil {
			v += correction[i/gs]
		}
		dst[i] = v
	}
	return Rotate(dst, g)
}

// ChooseW4A8Codebook picks the codebook of a tensor from its rotated rows
// (rows·in values): the fixed Gaussian table unless the group-normalised
// values are heavier-tailed than a Gaussian's (excess kurtosis above -0.1,
// comfy-kitchen's gate), in which case 16 levels are fitted to them by
// Lloyd-Max iterations from their quantiles. It samples at most 2^19 values
// with a fixed stride (the reference samples at random, so a fitted table
// may differ from ComfyUI's; either is valid, the file stores it).
func ChooseW4A8Codebook(rotated []float32, gs int) [16]float32 {
	sample := normalizedSample(rotated, gs, 1<<19)
	if excessKurtosis(sample) <= -0.1 {
		return W4A8FixedCodebook
	}
	return fitCodebook(sample)
}

// normalizedSample returns up to limit values x/max(|group|, 1e-8), taking
// every k-th group.
func normalizedSample(rotated []float32, gs, limit int) []float64 {
	groups := len(rotated) / gs
	step := max(1, groups*gs/limit)
	var out []float64
	for g := 0; g < groups; g += step {
		x := rotated[g*gs : (g+1)*gs]
		amax, _ := absMax(x)
		s := max(amax, w4a8Floor)
		for _, v := range x {
			out = append(out, float64(v/s))
		}
	}
	return out
}

// excessKurtosis returns E[((x-mean)/std)^4] - 3 with the unbiased std.
func excessKurtosis(x []float64) float64 {
	if len(x) < 2 {
		return -3
	}
	var mean float64
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	std := math.Sqrt(ss/float64(len(x)-1)) + 1e-9
	var k float64
	for _, v := range x {
		z := (v - mean) / std
		k += z * z * z * z
	}
	return k/float64(len(x)) - 3
}

// fitCodebook fits 16 levels to x: quantile start, 25 Lloyd iterations.
func fitCodebook(x []float64) [16]float32 {
	s := slices.Clone(x)
	slices.Sort(s)
	var cb [16]float64
	for i := range cb {
		pos := float64(i) / 15 * float64(len(s)-1)
		lo := int(pos)
		hi := min(lo+1, len(s)-1)
		cb[i] = s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
	}
	for range 25 {
		var sum [16]float64
		var cnt [16]int
		for _, v := range s {
			best := 0
			for i := 1; i < 16; i++ {
				if math.Abs(v-cb[i]) < math.Abs(v-cb[best]) {
					best = i
				}
			}
			sum[best] += v
			cnt[best]++
		}
		for i := range cb {
			if cnt[i] > 0 {
				cb[i] = sum[i] / float64(cnt[i])
			}
		}
	}
	var out [16]float32
	for i, v := range cb {
		out[i] = float32(v)
	}
	slices.Sort(out[:])
	return out
}

package synth

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/splitmix"
)

// Spec selects what to generate.
type Spec struct {
	// Arch is an architecture name from Archs ("sd1", "sd2", "sdxl", "flux", "wan",
	// "sd1_unet", "vae", "clip_l", "t5xxl").
	Arch string
	// Scale multiplies the widths of the diffusion model (0 or 1: real
	// size). Scaled widths are rounded to the nearest power of two, at
	// least 4, so that rows stay whole quantization blocks.
	Scale float64
	// TextScale and VAEScale scale the text encoders and the VAE; 0 means Scale.
	TextScale, VAEScale float64
	// Depth caps repeated blocks (transformer depth, CLIP layers, DiT
	// blocks); 0 keeps the real counts. Block names keep their real form.
	Depth int
	// Seed selects the data; the same Spec always gives the same bytes.
	Seed int64
	// DType is the storage type of floating-point tensors: F32, F16 or BF16
	// (0 is F32).
	DType formats.DType
}

// Init says how a tensor's values are drawn.
type Init uint8

// Value distributions.
const (
	// InitWeight draws roughly normal values with standard deviation 1/sqrt(fan-in).
	InitWeight Init = iota
	// InitBias draws small values around zero (standard deviation 0.02).
	InitBias
	// InitOne draws values around one (norm scales).
	InitOne
	// InitIndex stores 0, 1, 2, ... as I64 (position_ids buffers).
	InitIndex
	// InitWeightRealistic is InitWeight with the statistics that decide how
	// a 2-D weight quantizes in trained models: one input column in 64
	// scaled by 20 (outlier channels), one value in 50 by 4 (heavy tails),
	// and each row by a log-normal factor exp(0.5·N(0,1)) (per-row spread).
	InitWeightRealistic
	// InitZero stores zeros (a text encoder's embedding that makes its
	// hidden states zero whatever the prompt, to test a DiT on its own).
	InitZero
)

// TensorSpec is one generated tensor: its name, shape (PyTorch order) and
// storage type.
type TensorSpec struct {
	// Name is the full tensor name, prefix included.
	Name string
	// Shape is in PyTorch order.
	Shape []int64
	// Type is the storage type.
	Type formats.DType
	// Init is the value distribution.
	Init Init
}

// Tensors lists the tensors of spec in file order.
func Tensors(spec Spec) ([]TensorSpec, error) {
	dt, err := spec.dtype()
	if err != nil {
		return nil, err
	}
	parts, err := archParts(spec)
	if err != nil {
		return nil, err
	}
	var out []TensorSpec
	for _, p := range parts {
		b := &builder{prefix: p.prefix}
		p.build(b)
		out = append(out, b.out...)
	}
	for i := range out {
		out[i].Type = dt
		if out[i].Init == InitIndex {
			out[i].Type = formats.I64
		}
	}
	return out, nil
}

// Descriptors returns the tensors of spec as formats.Tensor values with
// types, shapes and sizes set (offsets are left to the writer).
func Descriptors(spec Spec) ([]formats.Tensor, error) {
	ts, err := Tensors(spec)
	if err != nil {
		return nil, err
	}
	out := make([]formats.Tensor, len(ts))
	for i, t := range ts {
		size, err := t.Type.Bytes(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("synth: tensor %q: %v", t.Name, err)
		}
		out[i] = formats.Tensor{Name: t.Name, Type: t.Type, Shape: t.Shape, Size: size}
	}
	return out, nil
}

// Params returns the total element count of spec's tensors.
func Params(spec Spec) (int64, error) {
	ts, err := Tensors(spec)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range ts {
		e, _ := formats.Elements(t.Shape)
		n += e
	}
	return n, nil
}

func (s Spec) dtype() (formats.DType, error) {
	switch s.DType {
	case formats.F32, formats.F16, formats.BF16:
		return s.DType, nil
	}
	return 0, fmt.Errorf("synth: dtype %s is not one of f32, f16, bf16", s.DType)
}

// Data returns a reader of t's bytes as generated for spec. It produces them
// on the fly and holds no more than one small buffer.
func Data(spec Spec, t TensorSpec) io.Reader {
	n, _ := formats.Elements(t.Shape)
	h := fnv.New64a()
	h.Write([]byte(t.Name))
	fan := int64(1)
	if len(t.Shape) > 1 {
		fan = n / t.Shape[0]
	} else if len(t.Shape) == 1 {
		fan = t.Shape[0]
	}
	return &dataReader{
		t:    t,
		left: n,
		seed: uint64(spec.Seed) ^ h.Sum64(),
		rng:  splitmix.Stream{State: uint64(spec.Seed) ^ h.Sum64()},
		std:  float32(1 / math.Sqrt(float64(max(fan, 1)))),
	}
}

type dataReader struct {
	t    TensorSpec
	i    int64  // elements produced so far
	left int64  // elements still to produce
	seed uint64 // the tensor's seed (spec seed and name)
	rng  splitmix.Stream
	std  float32
	buf  [8]byte
	pend []byte // bytes of a partly consumed element
}

// normal returns an approximately standard normal value: the sum of four
// 16-bit uniforms (Irwin-Hall), which is cheap and smooth enough for weights.
func (r *dataReader) normal() float32 {
	v := r.rng.Next()
	s := float32(v&0xffff) + float32(v>>16&0xffff) + float32(v>>32&0xffff) + float32(v>>48)
	// Mean 2×65535.5... and variance 4×65536²/12 for four uniforms.
	return (s - 131070) / 37837.23
}

func (r *dataReader) value() float32 {
	switch r.t.Init {
	case InitBias:
		return 0.02 * r.normal()
	case InitOne:
		return 1 + 0.02*r.normal()
	case InitWeightRealistic:
		return r.std * r.normal() * r.realistic()
	case InitZero:
		return 0
	}
	return r.std * r.normal()
}

// realistic returns the factor InitWeightRealistic gives element r.i: its
// row's and column's factors (functions of the tensor's seed and the
// index alone) times a heavy-tail draw from the stream.
func (r *dataReader) realistic() float32 {
	f := float32(1)
	if r.rng.Next()%50 == 0 {
		f = 4
	}
	if len(r.t.Shape) != 2 || r.t.Shape[1] == 0 {
		return f
	}
	row, col := uint64(r.i/r.t.Shape[1]), uint64(r.i%r.t.Shape[1])
	if splitmix.At(r.seed^0xc01, col)%64 == 0 {
		f *= 20
	}
	// A row's normal deviate: four 16-bit uniforms of one hash, as normal() sums them.
	v := splitmix.At(r.seed^0x20e, row)
	g := (float32(v&0xffff) + float32(v>>16&0xffff) + float32(v>>32&0xffff) + float32(v>>48) - 131070) / 37837.23
	return f * float32(math.Exp(0.5*float64(g)))
}

// elemSize is the byte count of one element of r's tensor.
func (r *dataReader) elemSize() int {
	switch {
	case r.t.Init == InitIndex:
		return 8
	case r.t.Type == formats.F16 || r.t.Type == formats.BF16:
		return 2
	}
	return 4
}

// encode writes the next element into dst, which holds at least elemSize bytes.
func (r *dataReader) encode(dst []byte) {
	if r.t.Init == InitIndex {
		binary.LittleEndian.PutUint64(dst, uint64(r.i))
		return
	}
	v := r.value()
	switch r.t.Type {
	case formats.F16:
		binary.LittleEndian.PutUint16(dst, F32ToF16(v))
	case formats.BF16:
		binary.LittleEndian.PutUint16(dst, F32ToBF16(v))
	default:
		binary.LittleEndian.PutUint32(dst, math.Float32bits(v))
	}
}

// Read fills p with the next bytes of the tensor.
func (r *dataReader) Read(p []byte) (int, error) {
	n := copy(p, r.pend)
	r.pend = r.pend[n:]
	k := r.elemSize()
	for r.left > 0 && len(p)-n >= k {
		r.encode(p[n:])
		r.i++
		r.left--
		n += k
	}
	if r.left > 0 && n < len(p) {
		// Split an element across calls.
		r.encode(r.buf[:])
		r.i++
		r.left--
		c := copy(p[n:], r.buf[:k])
		r.pend = r.buf[c:k]
		n += c
	}
	if n == 0 && r.left == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// F32ToF16 converts to IEEE half precision, rounding to nearest even. (synth
// keeps its own conversions so that it depends on formats alone.)
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	// Rebias the exponent in place and round to nearest even without a
	// branch (the rounding bit is random in generated data); a carry into
	// the exponent is the correct rounding, up to infinity.
	v := b&0x7fffffff - 112<<23
	v += 0x0fff + (v>>13)&1
	return sign | uint16(v>>13)
}

// F32ToBF16 converts to bfloat16, rounding to nearest even (NaN stays NaN).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

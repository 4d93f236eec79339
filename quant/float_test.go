package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// halfValue is an independent decoding of an IEEE half from its bit layout,
// in float64; ok is false for NaN.
func halfValue(h uint16) (v float64, ok bool) {
	s, e, m := h>>15, int(h>>10&0x1f), float64(h&0x3ff)
	switch {
	case e == 0x1f && m != 0:
		return 0, false
	case e == 0x1f:
		v = math.Inf(1)
	case e == 0:
		v = m / 1024 * math.Pow(2, -14)
	default:
		v = (1 + m/1024) * math.Pow(2, float64(e-15))
	}
	if s == 1 {
		v = -v
	}
	return v, true
}

func TestF16AllPatterns(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := F16ToF32(h)
		want, ok := halfValue(h)
		if !ok {
			if f == f {
				t.Fatalf("%#04x: decoded to %g, want NaN", h, f)
			}
			// Sign and payload kept, quiet bit set.
			if wb := uint32(h&0x8000)<<16 | 0x7fc00000 | uint32(h&0x3ff)<<13; math.Float32bits(f) != wb {
				t.Fatalf("%#04x: NaN bits %#08x, want %#08x", h, math.Float32bits(f), wb)
			}
			if back := F32ToF16(f); back != h&0x8000|0x7e00 {
				t.Fatalf("%#04x: NaN encoded back as %#04x, want %#04x", h, back, h&0x8000|0x7e00)
			}
			continue
		}
		if float64(f) != want || math.Signbit(float64(f)) != (h&0x8000 != 0) {
			t.Fatalf("%#04x: decoded %g, want %g", h, f, want)
		}
		if back := F32ToF16(f); back != h {
			t.Fatalf("%#04x: round trip gave %#04x", h, back)
		}
	}
}

func TestBF16AllPatterns(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := BF16ToF32(h)
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("%#04x: decoded bits %#08x", h, math.Float32bits(f))
		}
		want := h
		if f != f {
			want |= 0x40 // NaN: quiet bit forced, as ggml does
		}
		if back := F32ToBF16(f); back != want {
			t.Fatalf("%#04x: round trip gave %#04x, want %#04x", h, back, want)
		}
	}
}

// sampleFloats returns deterministic float32 values covering every exponent:
// random bit patterns, values near every half and bfloat16 rounding point,
// and the special values.
func sampleFloats(n int) []float32 {
	r := rand.New(rand.NewPCG(harnessSeed, 99))
	out := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 65504, 65519.99, 65520, 65536, 6.1035156e-05, 5.9604645e-08, 2.9802322e-08,
		2.9802326e-08, 1e-45, math.MaxFloat32, -math.MaxFloat32}
	for range n {
		out = append(out, math.Float32frombits(r.Uint32()))
		// Near a rounding point of f16 (13 dropped bits) and bf16 (16 dropped bits).
		hi := r.Uint32() &^ 0x1fff
		for _, low := range []uint32{0xfff, 0x1000, 0x1001, 0x0fff + 0x2000&r.Uint32()} {
			out = append(out, math.Float32frombits(hi|low))
		}
		hi = r.Uint32() &^ 0xffff
		out = append(out, math.Float32frombits(hi|0x7fff), math.Float32frombits(hi|0x8000), math.Float32frombits(hi|0x8001))
	}
	return out
}

// TestF16Nearest checks F32ToF16 against the definition of round to nearest
// even, using the neighbours of the chosen code: no neighbour is nearer, and
// on a tie the chosen code is even.
func TestF16Nearest(t *testing.T) {
	for _, f := range sampleFloats(20000) {
		h := F32ToF16(f)
		if f != f {
			continue
		}
		x := float64(f)
		v, _ := halfValue(h)
		if math.Abs(x) >= 65520 {
			if !math.IsInf(v, 0) || math.Signbit(v) != math.Signbit(x) {
				t.Fatalf("%g: encoded %#04x, want Inf", f, h)
			}
			continue
		}
		for _, nb := range []uint16{h - 1, h + 1} {
			if nb&0x7fff >= 0x7c00 || nb&0x8000 != h&0x8000 {
				continue
			}
			w, _ := halfValue(nb)
			d0, d1 := math.Abs(x-v), math.Abs(x-w)
			if d1 < d0 || (d1 == d0 && h&1 == 1) {
				t.Fatalf("%g (%#08x): encoded %#04x (%g), but %#04x (%g) is nearer or even", f, math.Float32bits(f), h, v, nb, w)
			}
		}
	}
}

// f8Layout is an independent description of an 8-bit float format.
type f8Layout struct {
	t          formats.DType
	ebits      int
	bias       int
	decode     func(byte) float32
	isNaN      func(byte) bool
	isInf      func(byte) bool
	negZeroNaN bool // FNUZ: 0x80 is NaN, not -0
}

func f8Layouts() []f8Layout {
	never := func(byte) bool { return false }
	return []f8Layout{
		{formats.F8_E4M3, 4, 7, F8E4M3ToF32, func(b byte) bool { return b&0x7f == 0x7f }, never, false},
		{formats.F8_E5M2, 5, 15, F8E5M2ToF32, func(b byte) bool { return b&0x7f > 0x7c }, func(b byte) bool { return b&0x7f == 0x7c }, false},
		{formats.F8_E4M3FNUZ, 4, 8, F8E4M3FNUZToF32, func(b byte) bool { return b == 0x80 }, never, true},
		{formats.F8_E5M2FNUZ, 5, 16, F8E5M2FNUZToF32, func(b byte) bool { return b == 0x80 }, never, true},
	}
}

// value computes code b from the layout formula (-1)^s·2^(e-bias)·(1+m/2^M),
// subnormal when e is 0.
func (l f8Layout) value(b byte) float64 {
	mbits := 7 - l.ebits
	s, e, m := int(b>>7), int(b>>mbits)&(1<<l.ebits-1), float64(int(b)&(1<<mbits-1))
	frac := m / math.Pow(2, float64(mbits))
	var v float64
	if e == 0 {
		v = frac * math.Pow(2, float64(1-l.bias))
	} else {
		v = (1 + frac) * math.Pow(2, float64(e-l.bias))
	}
	if s == 1 {
		v = -v
	}
	return v
}

func TestF8AllCodes(t *testing.T) {
	for _, l := range f8Layouts() {
		for i := range 256 {
			b := byte(i)
			got := l.decode(b)
			switch {
			case l.isNaN(b):
				if got == got {
					t.Errorf("%s %#02x: got %g, want NaN", l.t, b, got)
				}
			case l.isInf(b):
				if !math.IsInf(float64(got), 1-2*int(b>>7)) {
					t.Errorf("%s %#02x: got %g, want Inf", l.t, b, got)
				}
			default:
				want := l.value(b)
				if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
					t.Errorf("%s %#02x: got %g, want %g", l.t, b, got, want)
				}
			}
		}
	}
	// Largest finite values, as the format definitions give them.
	for _, c := range []struct {
		got, want float32
	}{{F8E4M3ToF32(0x7e), 448}, {F8E5M2ToF32(0x7b), 57344}, {F8E4M3FNUZToF32(0x7f), 240}, {F8E5M2FNUZToF32(0x7f), 57344},
		{F8E4M3ToF32(0x01), 0x1p-9}, {F8E4M3FNUZToF32(0x01), 0x1p-10}, {F8E5M2FNUZToF32(0x01), 0x1p-17}} {
		if c.got != c.want {
			t.Errorf("got %g, want %g", c.got, c.want)
		}
	}
	for i := range 256 {
		b := byte(i)
		got := E8M0ToF32(b)
		if b == 0xff {
			if got == got {
				t.Errorf("e8m0 0xff: got %g, want NaN", got)
			}
			continue
		}
		if want := math.Pow(2, float64(i-127)); float64(got) != want {
			t.Errorf("e8m0 %#02x: got %g, want %g", b, got, want)
		}
	}
	f4 := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	for i := range 16 {
		want := f4[i&7]
		if i&8 != 0 {
			want = -want
		}
		if got := F4E2M1ToF32(byte(i)); float64(got) != want || math.Signbit(float64(got)) != (i&8 != 0) {
			t.Errorf("f4 %#x: got %g, want %g", i, got, want)
		}
	}
}

func TestF8EncodeRoundTrip(t *testing.T) {
	enc := map[formats.DType]func(float32) byte{formats.F8_E4M3: F32ToF8E4M3, formats.F8_E5M2: F32ToF8E5M2}
	for _, l := range f8Layouts()[:2] {
		for i := range 256 {
			b := byte(i)
			if l.isNaN(b) {
				if got := enc[l.t](l.decode(b)); !l.isNaN(got) || got>>7 != b>>7 {
					t.Errorf("%s NaN %#02x encoded to %#02x", l.t, b, got)
				}
				continue
			}
			if got := enc[l.t](l.decode(b)); got != b {
				t.Errorf("%s %#02x: decoded %g, encoded back to %#02x", l.t, b, l.decode(b), got)
			}
		}
	}
}

// TestF8EncodeNearest compares the encoders with a brute-force search over
// every finite code (nearest value, ties to the even code, saturation at the
// largest finite value) on random values and on every midpoint between codes.
func TestF8EncodeNearest(t *testing.T) {
	type tc struct {
		l      f8Layout
		enc    func(float32) byte
		maxFin float64
	}
	cases := []tc{{f8Layouts()[0], F32ToF8E4M3, 448}, {f8Layouts()[1], F32ToF8E5M2, 57344}}
	for _, c := range cases {
		var codes []byte
		var vals [256]float64
		for i := range 256 {
			if b := byte(i); !c.l.isNaN(b) && !c.l.isInf(b) {
				codes = append(codes, b)
				vals[i] = c.l.value(b)
			}
		}
		nearest := func(x float64) byte {
			if x > c.maxFin {
				x = c.maxFin
			}
			if x < -c.maxFin {
				x = -c.maxFin
			}
			best := codes[0]
			for _, b := range codes {
				d, db := math.Abs(x-vals[b]), math.Abs(x-vals[best])
				if d < db || (d == db && b&1 == 0 && best&1 == 1) {
					best = b
				}
			}
			// Zero keeps the input's sign.
			if best&0x7f == 0 {
				best = 0
				if math.Signbit(x) {
					best = 0x80
				}
			}
			return best
		}
		var inputs []float32
		for _, a := range codes {
			for _, b := range codes {
				if a>>7 == b>>7 && b == a+1 {
					m := (c.l.value(a) + c.l.value(b)) / 2
					inputs = append(inputs, float32(m), math.Nextafter32(float32(m), 0), math.Nextafter32(float32(m), float32(math.Inf(1))))
				}
			}
		}
		r := rand.New(rand.NewPCG(harnessSeed, 5))
		for range 20000 {
			inputs = append(inputs, float32(r.NormFloat64()*math.Pow(2, float64(r.IntN(40)-25))))
		}
		inputs = append(inputs, 1e30, -1e30, 1e-30, float32(c.maxFin)*1.0001)
		for _, x := range inputs {
			if got, want := c.enc(x), nearest(float64(x)); got != want {
				t.Fatalf("%s: %g (%#08x) encoded to %#02x (%g), nearest is %#02x (%g)", c.l.t, x, math.Float32bits(x),
					got, c.l.value(got), want, c.l.value(want))
			}
		}
	}
	// Inf and NaN, as documented.
	inf := float32(math.Inf(1))
	for _, c := range []struct {
		got, want byte
	}{{F32ToF8E4M3(inf), 0x7e}, {F32ToF8E4M3(-inf), 0xfe}, {F32ToF8E4M3(float32(math.NaN())), 0x7f},
		{F32ToF8E5M2(inf), 0x7c}, {F32ToF8E5M2(-inf), 0xfc}, {F32ToF8E5M2(float32(math.NaN())), 0x7e}} {
		if c.got != c.want {
			t.Errorf("got %#02x, want %#02x", c.got, c.want)
		}
	}
}

func TestDecodeFloats(t *testing.T) {
	le := binary.LittleEndian
	cases := []struct {
		t    formats.DType
		src  []byte
		want []float32
	}{
		{formats.I8, []byte{0x80, 0xff, 5}, []float32{-128, -1, 5}},
		{formats.U8, []byte{0x80, 0xff}, []float32{128, 255}},
		{formats.Bool, []byte{0, 1, 7}, []float32{0, 1, 1}},
		{formats.I16, le.AppendUint16(nil, 0x8000), []float32{-32768}},
		{formats.U16, le.AppendUint16(nil, 0xffff), []float32{65535}},
		{formats.I32, le.AppendUint32(le.AppendUint32(nil, 0xffffffff), 16777217), []float32{-1, 16777216}},
		{formats.U32, le.AppendUint32(nil, 0xffffffff), []float32{4294967296}},
		{formats.I64, le.AppendUint64(nil, 1<<62), []float32{1 << 62}},
		{formats.U64, le.AppendUint64(nil, 1<<63), []float32{1 << 63}},
		{formats.F64, le.AppendUint64(nil, math.Float64bits(0.1)), []float32{0.1}},
		{formats.F32, le.AppendUint32(nil, math.Float32bits(-2.5)), []float32{-2.5}},
		{formats.F16, []byte{0x00, 0x3c, 0x00, 0xc0}, []float32{1, -2}},
		{formats.BF16, []byte{0x80, 0x3f}, []float32{1}},
		{formats.F4, []byte{0x72, 0x9f}, []float32{1, 6, -6, -0.5}}, // low nibble first
		{formats.F8_E4M3, []byte{0x38, 0x7e}, []float32{1, 448}},
		{formats.F8_E5M2, []byte{0x3c}, []float32{1}},
		{formats.F8_E4M3FNUZ, []byte{0x40}, []float32{1}},
		{formats.F8_E5M2FNUZ, []byte{0x40}, []float32{1}},
		{formats.F8_E8M0, []byte{127, 130}, []float32{1, 8}},
	}
	for _, c := range cases {
		got := make([]float32, len(c.want))
		if err := DecodeFloats(c.t, got, c.src); err != nil {
			t.Errorf("%s: %v", c.t, err)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s element %d: got %g, want %g", c.t, i, got[i], c.want[i])
			}
		}
	}
	if err := DecodeFloats(formats.F16, make([]float32, 2), make([]byte, 3)); err == nil {
		t.Error("3 bytes for 2 f16 values accepted")
	}
	if err := DecodeFloats(formats.F4, make([]float32, 3), make([]byte, 2)); err == nil {
		t.Error("odd F4 element count accepted")
	}
	if err := DecodeFloats(formats.F6_E2M3, make([]float32, 4), make([]byte, 3)); !errors.Is(err, ErrNoCodec) {
		t.Errorf("F6: got %v, want ErrNoCodec", err)
	}
	if err := DecodeFloats(formats.C64, make([]float32, 1), make([]byte, 8)); !errors.Is(err, ErrNoCodec) {
		t.Errorf("C64: got %v, want ErrNoCodec", err)
	}
}

func TestFloatRows(t *testing.T) {
	src := []float32{1, -2, 0.333, 65504, 1e6}
	buf := make([]byte, 2*len(src))
	if n := F32ToF16Row(buf, src); n != len(src) {
		t.Fatalf("encoded %d", n)
	}
	back := make([]float32, len(src))
	if n := F16ToF32Row(back, buf); n != len(src) {
		t.Fatalf("decoded %d", n)
	}
	want := []float32{1, -2, 0.33300781, 65504, float32(math.Inf(1))}
	for i := range want {
		if back[i] != want[i] {
			t.Errorf("f16 element %d: %g, want %g", i, back[i], want[i])
		}
	}
	// Short destinations convert what fits, like copy.
	if n := F32ToBF16Row(buf[:3], src); n != 1 {
		t.Errorf("bf16 into 3 bytes: %d elements", n)
	}
	if n := BF16ToF32Row(back[:2], buf); n != 2 {
		t.Errorf("bf16 into 2 floats: %d elements", n)
	}
}

// TestHalfRowsMatchScalar checks the row decoders, which inline the common
// case, against the scalar conversions on every 16-bit pattern.
func TestHalfRowsMatchScalar(t *testing.T) {
	src := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(src[2*i:], uint16(i))
	}
	got := make([]float32, 1<<16)
	F16ToF32Row(got, src)
	for i, f := range got {
		if want := F16ToF32(uint16(i)); math.Float32bits(f) != math.Float32bits(want) {
			t.Fatalf("f16 %#04x: row gave %#08x, scalar %#08x", i, math.Float32bits(f), math.Float32bits(want))
		}
	}
	BF16ToF32Row(got[:len(got)-1], src) // an odd count exercises the tail
	for i, f := range got[:len(got)-1] {
		if want := BF16ToF32(uint16(i)); math.Float32bits(f) != math.Float32bits(want) {
			t.Fatalf("bf16 %#04x: row gave %#08x, scalar %#08x", i, math.Float32bits(f), math.Float32bits(want))
		}
	}
	// Encoders: the row forms against the scalar ones on the sample floats.
	fs := sampleFloats(5000)
	enc := make([]byte, 2*len(fs))
	F32ToF16Row(enc, fs)
	for i, f := range fs {
		if got, want := binary.LittleEndian.Uint16(enc[2*i:]), F32ToF16(f); got != want {
			t.Fatalf("f16 row of %g: %#04x, scalar %#04x", f, got, want)
		}
	}
	F32ToBF16Row(enc, fs)
	for i, f := range fs {
		if got, want := binary.LittleEndian.Uint16(enc[2*i:]), F32ToBF16(f); got != want {
			t.Fatalf("bf16 row of %g: %#04x, scalar %#04x", f, got, want)
		}
	}
}

// TestHalfRowEncodersAllPatterns checks the row encoders (the vector
// kernels where the CPU has them) against the scalar conversions on a
// spread of bit patterns covering every exponent, both signs, NaN payloads
// and the f16 rounding boundaries, and with SDTOOL_EXHAUSTIVE on every
// float32 bit pattern.
func TestHalfRowEncodersAllPatterns(t *testing.T) {
	const chunk = 1 << 16
	src := make([]float32, chunk)
	f16, bf16 := make([]byte, 2*chunk), make([]byte, 2*chunk)
	check := func(src []float32) {
		F32ToF16Row(f16, src)
		F32ToBF16Row(bf16, src)
		for i, f := range src {
			if got, want := binary.LittleEndian.Uint16(f16[2*i:]), F32ToF16(f); got != want {
				t.Fatalf("f16 row of %#08x: %#04x, scalar %#04x", math.Float32bits(f), got, want)
			}
			if got, want := binary.LittleEndian.Uint16(bf16[2*i:]), F32ToBF16(f); got != want {
				t.Fatalf("bf16 row of %#08x: %#04x, scalar %#04x", math.Float32bits(f), got, want)
			}
		}
	}
	if os.Getenv("SDTOOL_EXHAUSTIVE") != "" {
		for hi := range uint64(1 << 16) {
			for lo := range src {
				src[lo] = math.Float32frombits(uint32(hi<<16) | uint32(lo))
			}
			check(src)
		}
		return
	}
	// Every 16-bit top half with a few low halves: each exponent and the
	// bits just above and below the f16 and bf16 rounding points.
	for _, lo := range []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x7fff, 0x8000, 0x8001, 0xe000, 0xffff} {
		for hi := range src {
			src[hi] = math.Float32frombits(uint32(hi)<<16 | lo)
		}
		check(src)
	}
}

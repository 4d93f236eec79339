package infer

import (
	"fmt"
	"math"
)

// NoiseSource produces standard normal noise. Each FillNormal call is one draw of len(dst) values, the
// unit in which PyTorch's generators (and stable-diffusion.cpp's imitations of them) advance, so the
// same sequence of call sizes gives the same numbers.
type NoiseSource interface {
	// FillNormal overwrites dst with len(dst) standard normal samples.
	FillNormal(dst []float32)
}

// RNG kinds accepted by NewRNG (sd-cli's --rng values).
const (
	// RNGCUDA is PyTorch's CUDA torch.randn, computed on the CPU (Philox); sd.cpp's default.
	RNGCUDA = "cuda"
	// RNGCPU is PyTorch's CPU torch.randn (mt19937).
	RNGCPU = "cpu"
)

// NewRNG returns the generator named kind ("cuda" or "cpu", as sd-cli's --rng) seeded with seed.
func NewRNG(kind string, seed uint64) (NoiseSource, error) {
	switch kind {
	case RNGCUDA, "std_default":
		// sd-cli's "std_default" is its own name for the same Philox generator.
		return NewPhilox(seed), nil
	case RNGCPU:
		return NewTorchCPU(seed), nil
	}
	return nil, fmt.Errorf("unknown rng %q (want %q or %q)", kind, RNGCUDA, RNGCPU)
}

// Philox reproduces torch.randn(..., device="cuda") with a Philox 4x32-10 generator, the way A1111 and
// stable-diffusion.cpp compute it on the CPU: draw number k of n uses the counter (offset, 0, k, 0) and the
// key (seed low 32 bits, seed high 32 bits); the first two output words go through one Box-Muller branch
// (the sine) in float32. Each call advances offset by one, whatever its size.
type Philox struct {
	seed   uint64
	offset uint32
}

// Philox 4x32 constants (Salmon et al. 2011), as cuRAND and PyTorch use them.
const (
	philoxM0 = 0xD2511F53
	philoxM1 = 0xCD9E8D57
	philoxW0 = 0x9E3779B9
	philoxW1 = 0xBB67AE85
)

// Box-Muller scale factors in float32, computed once at run time so that they carry the float32 rounding
// of each step exactly as cuRAND's CURAND_2POW32_INV and CURAND_2POW32_INV_2PI do (Go would fold
// constant expressions exactly instead).
var (
	twoPow32Inv       = float32(2.3283064e-10)
	twoPow32Inv2Pi    = twoPow32Inv * float32(6.2831855)
	twoPow32InvHalf   = twoPow32Inv / 2
	twoPow32Inv2PiHlf = twoPow32Inv2Pi / 2
)

// NewPhilox returns a Philox generator at offset 0 (torch.manual_seed(seed) on a CUDA device).
func NewPhilox(seed uint64) *Philox { return &Philox{seed: seed} }

// Seed resets the generator to seed at offset 0.
func (p *Philox) Seed(seed uint64) { p.seed, p.offset = seed, 0 }

// Randn returns n samples (one draw).
func (p *Philox) Randn(n int) []float32 {
	out := make([]float32, n)
	p.FillNormal(out)
	return out
}

// philox4x32 runs the 10 rounds on one counter and returns the first two output words.
func philox4x32(c0, c1, c2, c3, k0, k1 uint32) (uint32, uint32) {
	for r := 0; r < 10; r++ {
		if r > 0 {
			k0 += philoxW0
			k1 += philoxW1
		}
		p0 := uint64(c0) * philoxM0
		p1 := uint64(c2) * philoxM1
		c0, c1, c2, c3 = uint32(p1>>32)^c1^k0, uint32(p1), uint32(p0>>32)^c3^k1, uint32(p0)
	}
	return c0, c1
}

// FillNormal fills dst with one draw. Only 2^32 values fit one draw (the counter's third word); beyond
// that the values repeat, as in the reference implementations.
func (p *Philox) FillNormal(dst []float32) {
	k0, k1 := uint32(p.seed), uint32(p.seed>>32)
	for i := range dst {
		x, y := philox4x32(p.offset, 0, uint32(i), 0, k0, k1)
		dst[i] = boxMullerSin(x, y)
	}
	p.offset++
}

// boxMullerSin is the float Box-Muller of sd.cpp's cuda RNG, first output only. u and v are float
// (the explicit float32 conversions keep each product rounded on its own: Go may otherwise fuse a
// multiply and add), but its log, sqrt and sin are the double functions (an unqualified log(u) in
// that C++ resolves to ::log(double); sd-cli's disassembly calls log, sqrt and sin, not logf): the
// radius is rounded to float once, and radius times sine is a double product rounded once. Rounding
// the log and the sine to float as well, as an all-float Box-Muller would, moves about a third of
// the values by one ulp, which the UNet amplifies into a 51 dB image difference.
func boxMullerSin(x, y uint32) float32 {
	u := float32(float32(x)*twoPow32Inv) + twoPow32InvHalf
	v := float32(float32(y)*twoPow32Inv2Pi) + twoPow32Inv2PiHlf
	s := float32(math.Sqrt(-2 * math.Log(float64(u))))
	return float32(float64(s) * math.Sin(float64(v)))
}

// TorchCPU reproduces torch.randn on PyTorch's CPU generator (torch.manual_seed then torch.randn), as
// stable-diffusion.cpp's --rng cpu does: an mt19937 engine, and PyTorch's normal transform, which
// depends on the draw size. Draws of 16 or more values take 24-bit float uniforms and pair value j
// with j+8 within each block of 16 (the last, partial block is redrawn as a whole block of 16 ending at
// the last value); smaller draws use double-precision Box-Muller on 53-bit uniforms and keep the second
// value of each pair for the next sample, across calls.
type TorchCPU struct {
	state    [mtN]uint32
	left     int
	next     int
	hasGauss bool
	gauss    float64
}

const (
	mtN       = 624
	mtM       = 397
	mtMatrixA = 0x9908b0df
	mtUpper   = 0x80000000
	mtLower   = 0x7fffffff
)

// NewTorchCPU returns the CPU generator seeded as torch.manual_seed(seed) seeds it.
func NewTorchCPU(seed uint64) *TorchCPU {
	g := &TorchCPU{}
	g.Seed(seed)
	return g
}

// Seed reseeds the generator (PyTorch uses the seed's low 32 bits for mt19937).
func (g *TorchCPU) Seed(seed uint64) {
	g.state[0] = uint32(seed)
	for j := 1; j < mtN; j++ {
		prev := g.state[j-1]
		g.state[j] = 1812433253*(prev^(prev>>30)) + uint32(j)
	}
	g.left, g.next, g.hasGauss = 1, 0, false
}

func (g *TorchCPU) twist() {
	mix := func(u, v uint32) uint32 {
		y := (u & mtUpper) | (v & mtLower)
		y >>= 1
		if v&1 != 0 {
			y ^= mtMatrixA
		}
		return y
	}
	s := &g.state
	for j := 0; j < mtN-mtM; j++ {
		s[j] = s[j+mtM] ^ mix(s[j], s[j+1])
	}
	for j := mtN - mtM; j < mtN-1; j++ {
		s[j] = s[j+mtM-mtN] ^ mix(s[j], s[j+1])
	}
	s[mtN-1] = s[mtM-1] ^ mix(s[mtN-1], s[0])
	g.left, g.next = mtN, 0
}

// Uint32 returns the next tempered mt19937 output.
func (g *TorchCPU) Uint32() uint32 {
	g.left--
	if g.left == 0 {
		g.twist()
	}
	y := g.state[g.next]
	g.next++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

// uniform24 is PyTorch's float uniform in [0, 1): the low 24 bits of one output.
func (g *TorchCPU) uniform24() float32 {
	return float32(g.Uint32()&(1<<24-1)) * (1.0 / (1 << 24))
}

// normalDouble is PyTorch's at::normal_distribution<double>: Box-Muller on two 53-bit uniforms (each
// from a 64-bit draw, high word first), returning the cosine branch and caching the sine branch.
func (g *TorchCPU) normalDouble() float64 {
	if g.hasGauss {
		g.hasGauss = false
		return g.gauss
	}
	u1 := g.uniform53()
	u2 := g.uniform53()
	r := math.Sqrt(-2 * math.Log1p(-u2))
	theta := 2 * math.Pi * u1
	g.gauss, g.hasGauss = r*math.Sin(theta), true
	return r * math.Cos(theta)
}

func (g *TorchCPU) uniform53() float64 {
	hi := uint64(g.Uint32())
	lo := uint64(g.Uint32())
	return float64((hi<<32|lo)&(1<<53-1)) * (1.0 / (1 << 53))
}

// fill16 is PyTorch's normal_fill_16 on one block: u1 = 1 - data[j], u2 = data[j+8].
func fill16(d []float32) {
	_ = d[15]
	for j := 0; j < 8; j++ {
		u1 := 1 - d[j]
		u2 := d[j+8]
		r := float32(math.Sqrt(float64(float32(-2 * float32(math.Log(float64(u1)))))))
		// theta is computed in double (2 * pi_double * u2) and then stored as float, as in PyTorch.
		theta := float32(2 * math.Pi * float64(u2))
		d[j] = r * float32(math.Cos(float64(theta)))
		d[j+8] = r * float32(math.Sin(float64(theta)))
	}
}

// FillNormal fills dst with one draw of torch.randn on the CPU generator.
func (g *TorchCPU) FillNormal(dst []float32) {
	n := len(dst)
	if n < 16 {
		for i := range dst {
			dst[i] = float32(g.normalDouble())
		}
		return
	}
	for i := range dst {
		dst[i] = g.uniform24()
	}
	for i := 0; i+16 <= n; i += 16 {
		fill16(dst[i : i+16])
	}
	if n%16 != 0 {
		// PyTorch redraws the last 16 values (overlapping the last full block) and transforms them again.
		tail := dst[n-16:]
		for i := range tail {
			tail[i] = g.uniform24()
		}
		fill16(tail)
	}
}

// Randn returns n samples (one draw).
func (g *TorchCPU) Randn(n int) []float32 {
	out := make([]float32, n)
	g.FillNormal(out)
	return out
}

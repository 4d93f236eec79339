package infer

import (
	"math"
	"testing"
)

func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > tol {
			t.Fatalf("%s[%d] = %.8f, want %.8f (all: %v)", what, i, got[i], want[i], got)
		}
	}
}

// TestPhiloxPublished checks the generator against the values A1111's rng_philox.py documents for
// Generator(seed=0).randn((3, 4)), which are torch.randn(3, 4, device="cuda") after torch.manual_seed(0).
// A1111 computes Box-Muller in float64; sd.cpp (and this code) takes float inputs and rounds the radius and the
// result to float (its log, sqrt and sin are the double functions), hence 2e-6.
func TestPhiloxPublished(t *testing.T) {
	want := []float64{
		-0.92466259, -0.42534415, -2.6438457, 0.14518388,
		-0.12086647, -0.57972564, -0.62285122, -0.32838709,
		-1.07454231, -0.36314407, -1.67105067, 2.26550497,
	}
	closeTo(t, "philox seed 0", NewPhilox(0).Randn(12), want, 2e-6)
}

// TestPhiloxStructure checks the properties that follow from the algorithm: a draw's value k does not
// depend on the draw size, each call moves to the next offset, and the seed's high word is used.
func TestPhiloxStructure(t *testing.T) {
	a := NewPhilox(42).Randn(5)
	b := NewPhilox(42).Randn(1000)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("value %d depends on the draw size: %v vs %v", i, a[i], b[i])
		}
	}
	g := NewPhilox(42)
	first := g.Randn(4)
	second := g.Randn(4)
	if first[0] == second[0] {
		t.Fatal("the second draw repeats the first")
	}
	g.Seed(42)
	if again := g.Randn(4); again[0] != first[0] {
		t.Fatal("Seed does not reset the offset")
	}
	if x, y := NewPhilox(1).Randn(1)[0], NewPhilox(1 | 1<<32).Randn(1)[0]; x == y {
		t.Fatal("the seed's high word is ignored")
	}
	// Moments of a large draw: mean 0, variance 1 (4 sigma bounds for 1<<16 samples).
	v := NewPhilox(7).Randn(1 << 16)
	var s, s2 float64
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("non-finite sample %v", x)
		}
		s += float64(x)
		s2 += float64(x) * float64(x)
	}
	n := float64(len(v))
	if mean, variance := s/n, s2/n-(s/n)*(s/n); math.Abs(mean) > 4/math.Sqrt(n) || math.Abs(variance-1) > 4*math.Sqrt(2/n) {
		t.Fatalf("mean %v variance %v", mean, variance)
	}
}

// TestPhiloxReference checks the Philox 4x32-10 block function against the known-answer vectors of
// Random123 (Salmon et al.), the published reference for the algorithm.
func TestPhiloxReference(t *testing.T) {
	full := func(c [4]uint32, k [2]uint32) [4]uint32 {
		for r := 0; r < 10; r++ {
			if r > 0 {
				k[0] += philoxW0
				k[1] += philoxW1
			}
			p0 := uint64(c[0]) * philoxM0
			p1 := uint64(c[2]) * philoxM1
			c = [4]uint32{uint32(p1>>32) ^ c[1] ^ k[0], uint32(p1), uint32(p0>>32) ^ c[3] ^ k[1], uint32(p0)}
		}
		return c
	}
	cases := []struct {
		c    [4]uint32
		k    [2]uint32
		want [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, [2]uint32{0, 0}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff}, [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0}, [4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	}
	for _, c := range cases {
		if got := full(c.c, c.k); got != c.want {
			t.Errorf("philox4x32-10(%08x, %08x) = %08x, want %08x", c.c, c.k, got, c.want)
		}
		x, y := philox4x32(c.c[0], c.c[1], c.c[2], c.c[3], c.k[0], c.k[1])
		if x != c.want[0] || y != c.want[1] {
			t.Errorf("philox4x32 first words %08x %08x, want %08x %08x", x, y, c.want[0], c.want[1])
		}
	}
}

// TestTorchCPUPublished checks torch.manual_seed(0) followed by torch.randn on the CPU against values
// printed in public PyTorch examples (4 decimals): small draws (double Box-Muller, with the cached
// second value), draws of 16 and more (float blocks of 16), a size that is not a multiple of 16 (the
// redrawn tail), and the generator state carried from one call to the next.
func TestTorchCPUPublished(t *testing.T) {
	// torch.randn(2, 3) and torch.distributions.Normal(0, 1).rsample((8,)) after manual_seed(0).
	small := []float64{1.5410, -0.2934, -2.1788, 0.5684, -1.0845, -1.3986, 0.4033, 0.8380}
	closeTo(t, "randn(2,3)", NewTorchCPU(0).Randn(6), small[:6], 5e-5)
	closeTo(t, "randn(8)", NewTorchCPU(0).Randn(8), small, 5e-5)
	// torch.randn(4, 4) after manual_seed(0) (kornia's CenterCrop example, among many).
	block := []float64{
		-1.1258, -1.1524, -0.2506, -0.4339, 0.8487, 0.6920, -0.3160, -2.1152,
		0.3223, -1.2633, 0.3500, 0.3081, 0.1198, 1.2377, 1.1168, -0.2473,
	}
	closeTo(t, "randn(4,4)", NewTorchCPU(0).Randn(16), block, 5e-5)
	// X = randn(10, 4); W = randn(4, 4); Y = randn(10, 4) after manual_seed(0) (a published autograd
	// walk-through): 40 values exercise the redrawn tail, the next calls the carried state.
	g := NewTorchCPU(0)
	x := []float64{
		-1.1258, -1.1524, -0.2506, -0.4339, 0.8487, 0.6920, -0.3160, -2.1152,
		0.3223, -1.2633, 0.3500, 0.3081, 0.1198, 1.2377, 1.1168, -0.2473,
		-1.3527, -1.6959, 0.5667, 0.7935, 0.5988, -1.5551, -0.3414, 1.8530,
		-0.2159, -0.7425, 0.5627, 0.2596, -0.1740, -0.6787, 0.9383, 0.4889,
		1.2032, 0.0845, -1.2001, -0.0048, -0.5181, -0.3067, -1.5810, 1.7066,
	}
	w := []float64{
		0.2055, -0.4503, -0.5731, -0.5554, 0.5943, 1.5419, 0.5073, -0.5910,
		-1.3253, 0.1886, -0.0691, -0.4949, -1.4959, -0.1938, 0.4455, 1.3253,
	}
	y := []float64{
		1.5091, 2.0820, 1.7067, 2.3804, -1.1256, -0.3170, -1.0925, -0.0852,
		0.3276, -0.7607, -1.5991, 0.0185, -0.7504, 0.1854, 0.6211, 0.6382,
		-0.0033, -0.5344, 1.1687, 0.3945, 1.9415, 0.7915, -0.0203, -0.4372,
		-0.2188, -2.4351, -0.0729, -0.0340, 0.9625, 0.3492, -0.9215, -0.0562,
		-0.6227, -0.4637, 1.9218, -0.4025, 0.1239, 1.1648, 0.9234, 1.3873,
	}
	closeTo(t, "X", g.Randn(40), x, 5e-5)
	closeTo(t, "W", g.Randn(16), w, 5e-5)
	closeTo(t, "Y", g.Randn(40), y, 5e-5)
}

func TestTorchCPUMT19937(t *testing.T) {
	// The reference mt19937 (Matsumoto & Nishimura) seeded with 5489 starts 3499211612, 581869302, and
	// its 10000th output is 4123659995 (the C++ standard's check value).
	g := NewTorchCPU(5489)
	if a, b := g.Uint32(), g.Uint32(); a != 3499211612 || b != 581869302 {
		t.Fatalf("first outputs %d %d", a, b)
	}
	for i := 3; i < 10000; i++ {
		g.Uint32()
	}
	if v := g.Uint32(); v != 4123659995 {
		t.Fatalf("10000th output %d", v)
	}
}

func TestNewRNG(t *testing.T) {
	for _, k := range []string{"cuda", "cpu", "std_default"} {
		g, err := NewRNG(k, 3)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]float32, 4)
		g.FillNormal(buf)
		if buf[0] == 0 && buf[1] == 0 {
			t.Fatalf("%s: zeros", k)
		}
	}
	if _, err := NewRNG("gpu", 0); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

func BenchmarkPhiloxFill(b *testing.B) {
	g := NewPhilox(0)
	buf := make([]float32, 4*64*64)
	b.SetBytes(int64(4 * len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		g.FillNormal(buf)
	}
}

package lora

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/quant"
)

const benchN = 3072 // a Flux attention projection

// baseline decodes a benchN×benchN f16 tensor to float32 in chunks of
// 256 rows (the step before a delta is added in a streamed bake) and
// returns the time it took. The benchmarks run it in every iteration, next
// to what they measure, so that the ratio they report holds on a busy
// machine too.
type baseline struct {
	src []byte
	dst []float32
}

func newBaseline() *baseline {
	// Weights, not zeros: zeros take the subnormal path of the decoder.
	r := rand.New(rand.NewPCG(5, 6))
	return &baseline{src: encode(formats.F16, randn(r, 256*benchN, 0.05)), dst: make([]float32, 256*benchN)}
}

func (bl *baseline) run() time.Duration {
	start := time.Now()
	for row := 0; row < benchN; row += 256 {
		quant.F16ToF32Row(bl.dst, bl.src)
	}
	return time.Since(start)
}

// benchTarget builds an adapter layer of the given kind on one
// benchN×benchN weight.
func benchTarget(b *testing.B, kind string) *Target {
	r := rand.New(rand.NewPCG(1, 2))
	m := newMem("bench.safetensors")
	p := "lora_unet_double_blocks_0_img_attn_proj"
	switch kind {
	case "lora-r16", "lora-r64":
		rank := int64(16)
		if kind == "lora-r64" {
			rank = 64
		}
		m.add(p+".lora_up.weight", formats.F16, []int64{benchN, rank}, randn(r, int(benchN*rank), 0.1))
		m.add(p+".lora_down.weight", formats.F16, []int64{rank, benchN}, randn(r, int(benchN*rank), 0.1))
	case "loha-r16":
		for _, h := range []string{"1", "2"} {
			m.add(p+".hada_w"+h+"_a", formats.F16, []int64{benchN, 16}, randn(r, benchN*16, 0.1))
			m.add(p+".hada_w"+h+"_b", formats.F16, []int64{16, benchN}, randn(r, benchN*16, 0.1))
		}
	case "lokr-f8":
		// LyCORIS factor 8: w1 [8, 8] full, w2 [384, 384] as a rank-16 product.
		m.add(p+".lokr_w1", formats.F16, []int64{8, 8}, randn(r, 64, 0.1))
		m.add(p+".lokr_w2_a", formats.F16, []int64{384, 16}, randn(r, 384*16, 0.1))
		m.add(p+".lokr_w2_b", formats.F16, []int64{16, 384}, randn(r, 384*16, 0.1))
	case "full":
		m.add(p+".diff", formats.F16, []int64{benchN, benchN}, randn(r, benchN*benchN, 0.1))
	}
	base, err := NewBase([]formats.Tensor{{Name: "model.diffusion_model.double_blocks.0.img_attn.proj.weight", Type: formats.F16, Shape: []int64{benchN, benchN}}}, names.Flux, "")
	if err != nil {
		b.Fatal(err)
	}
	a, err := Read(m)
	if err != nil {
		b.Fatal(err)
	}
	plan, err := base.Match(Use{Adapter: a, Strength: 1})
	if err != nil {
		b.Fatal(err)
	}
	t := plan.Targets[0]
	if err := t.Prepare(); err != nil {
		b.Fatal(err)
	}
	return t
}

// BenchmarkDelta adds one layer's delta to a benchN×benchN tensor in
// chunks of 256 rows, on one goroutine (a streamed bake runs one such
// producer per core). x-decode is the time over that of decoding the same
// tensor from f16.
func BenchmarkDelta(b *testing.B) {
	for _, kind := range []string{"lora-r16", "lora-r64", "loha-r16", "lokr-f8", "full"} {
		b.Run(kind, func(b *testing.B) {
			t := benchTarget(b, kind)
			defer t.Release()
			bl := newBaseline()
			dst := make([]float32, 256*benchN)
			b.SetBytes(4 * benchN * benchN)
			var base, delta time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				base += bl.run()
				start := time.Now()
				for row := int64(0); row < benchN; row += 256 {
					if err := t.AddTo(dst, row*benchN); err != nil {
						b.Fatal(err)
					}
				}
				delta += time.Since(start)
			}
			b.ReportMetric(float64(delta)/float64(base), "x-decode")
		})
	}
}

// BenchmarkExtract decomposes the difference of a benchN×benchN layer at
// rank 64 (a rank-128 signal plus noise, the spectrum of a fine-tune's
// attention update), on one goroutine. x-delta is the time over that of
// baking a rank-64 delta of the same size on one goroutine; ns/op includes
// that bake.
func BenchmarkExtract(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	u, v := randn(r, benchN*128, 1), randn(r, 128*benchN, 1)
	d := make([]float32, benchN*benchN)
	lr := lowRank{r: 128, up: u, down: v}
	lr.addRows(d, 0, benchN, benchN, 0.01)
	for i := range d {
		d[i] += float32(r.NormFloat64() * 1e-3)
	}
	t := benchTarget(b, "lora-r64")
	defer t.Release()
	dst := make([]float32, benchN*benchN)
	var kept float64
	var delta, extract time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := t.AddTo(dst, 0); err != nil {
			b.Fatal(err)
		}
		delta += time.Since(start)
		start = time.Now()
		dec, err := Decompose(d, benchN, benchN, "bench", ExtractOptions{Rank: 64, Workers: 1})
		if err != nil {
			b.Fatal(err)
		}
		extract += time.Since(start)
		kept = dec.Kept
	}
	b.ReportMetric(float64(extract)/float64(delta), "x-delta")
	b.ReportMetric(kept, "kept")
}

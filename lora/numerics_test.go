package lora

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/names"
)

// The references below compute each product element by element in
// float64, straight from the definitions (the einsum strings of LyCORIS's
// rebuild functions), without the folding and row kernels the package uses.

// refLoRA: ΔW[o, i, s] = Σ_r up[o, r]·down[r, i, s].
func refLoRA(up, down []float32, out, r, cols int) []float64 {
	d := make([]float64, out*cols)
	for o := 0; o < out; o++ {
		for j := 0; j < cols; j++ {
			var s float64
			for k := 0; k < r; k++ {
				s += float64(up[o*r+k]) * float64(down[k*cols+j])
			}
			d[o*cols+j] = s
		}
	}
	return d
}

// refTuckerLoRA: ΔW[o, i, s] = Σ_ab up[o, a]·mid[a, b, s]·down[b, i].
func refTuckerLoRA(up, mid, down []float32, out, ra, rb, in, kk int) []float64 {
	d := make([]float64, out*in*kk)
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			for s := 0; s < kk; s++ {
				var v float64
				for a := 0; a < ra; a++ {
					for b := 0; b < rb; b++ {
						v += float64(up[o*ra+a]) * float64(mid[(a*rb+b)*kk+s]) * float64(down[b*in+i])
					}
				}
				d[(o*in+i)*kk+s] = v
			}
		}
	}
	return d
}

// refTucker: w[p, q, s] = Σ_ij t[i, j, s]·wa[i, p]·wb[j, q] (LyCORIS's
// rebuild_tucker, "i j ..., i p, j r -> p r ...").
func refTucker(tc, wa, wb []float32, ri, rj, p, q, kk int) []float64 {
	w := make([]float64, p*q*kk)
	for a := 0; a < p; a++ {
		for b := 0; b < q; b++ {
			for s := 0; s < kk; s++ {
				var v float64
				for i := 0; i < ri; i++ {
					for j := 0; j < rj; j++ {
						v += float64(tc[(i*rj+j)*kk+s]) * float64(wa[i*p+a]) * float64(wb[j*q+b])
					}
				}
				w[(a*q+b)*kk+s] = v
			}
		}
	}
	return w
}

// refKron: (w1 ⊗ w2)[i1·b + i2, j1·d + j2] = w1[i1, j1]·w2[i2, j2].
func refKron(w1 []float64, a, c int, w2 []float64, b, d int) []float64 {
	out := make([]float64, a*b*c*d)
	for i1 := 0; i1 < a; i1++ {
		for i2 := 0; i2 < b; i2++ {
			for j1 := 0; j1 < c; j1++ {
				for j2 := 0; j2 < d; j2++ {
					out[(i1*b+i2)*(c*d)+j1*d+j2] = w1[i1*c+j1] * w2[i2*d+j2]
				}
			}
		}
	}
	return out
}

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// numCase is one adapter layer on one base tensor.
type numCase struct {
	name   string
	base   string  // canonical base name
	shape  []int64 // base shape
	v      names.Version
	module string
	// build adds the factors to m and returns the reference delta (before
	// strength, after alpha/rank) of the whole tensor.
	build func(r *rand.Rand, m *memModel) []float64
}

func numCases() []numCase {
	const o, i = 24, 20
	conv := []int64{12, 8, 3, 3}
	lin := []int64{o, i}
	convName := "model.diffusion_model.input_blocks.1.0.in_layers.2.weight"
	linName := "model.diffusion_model.double_blocks.0.img_attn.proj.weight"
	return []numCase{
		{"lora linear", linName, lin, names.Flux, "lora_unet_double_blocks_0_img_attn_proj", func(r *rand.Rand, m *memModel) []float64 {
			up, down := randn(r, o*4, 1), randn(r, 4*i, 1)
			m.add("lora_unet_double_blocks_0_img_attn_proj.lora_up.weight", formats.F32, []int64{o, 4}, up)
			m.add("lora_unet_double_blocks_0_img_attn_proj.lora_down.weight", formats.F32, []int64{4, i}, down)
			m.add("lora_unet_double_blocks_0_img_attn_proj.alpha", formats.F32, nil, []float32{2})
			return scale(refLoRA(up, down, o, 4, i), 2.0/4)
		}},
		{"lora rank 7 (not a multiple of 4), no alpha", linName, lin, names.Flux, "x", func(r *rand.Rand, m *memModel) []float64 {
			up, down := randn(r, o*7, 1), randn(r, 7*i, 1)
			m.add("diffusion_model.double_blocks.0.img_attn.proj.lora_B.weight", formats.F32, []int64{o, 7}, up)
			m.add("diffusion_model.double_blocks.0.img_attn.proj.lora_A.weight", formats.F32, []int64{7, i}, down)
			return refLoRA(up, down, o, 7, i)
		}},
		{"locon conv", convName, conv, names.SD1, "", func(r *rand.Rand, m *memModel) []float64 {
			up, down := randn(r, 12*3, 1), randn(r, 3*8*9, 1)
			m.add("lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", formats.F32, []int64{12, 3, 1, 1}, up)
			m.add("lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", formats.F32, []int64{3, 8, 3, 3}, down)
			m.add("lora_unet_down_blocks_0_resnets_0_conv1.alpha", formats.F32, nil, []float32{1.5})
			return scale(refLoRA(up, down, 12, 3, 72), 0.5)
		}},
		{"locon tucker (lora_mid)", convName, conv, names.SD1, "", func(r *rand.Rand, m *memModel) []float64 {
			up, mid, down := randn(r, 12*3, 1), randn(r, 3*2*9, 1), randn(r, 2*8, 1)
			m.add("lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", formats.F32, []int64{12, 3, 1, 1}, up)
			m.add("lora_unet_down_blocks_0_resnets_0_conv1.lora_mid.weight", formats.F32, []int64{3, 2, 3, 3}, mid)
			m.add("lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", formats.F32, []int64{2, 8, 1, 1}, down)
			return refTuckerLoRA(up, mid, down, 12, 3, 2, 8, 9)
		}},
		{"loha linear", linName, lin, names.Flux, "", func(r *rand.Rand, m *memModel) []float64 {
			a1, b1, a2, b2 := randn(r, o*3, 1), randn(r, 3*i, 1), randn(r, o*5, 1), randn(r, 5*i, 1)
			p := "lora_unet_double_blocks_0_img_attn_proj"
			m.add(p+".hada_w1_a", formats.F32, []int64{o, 3}, a1)
			m.add(p+".hada_w1_b", formats.F32, []int64{3, i}, b1)
			m.add(p+".hada_w2_a", formats.F32, []int64{o, 5}, a2)
			m.add(p+".hada_w2_b", formats.F32, []int64{5, i}, b2)
			m.add(p+".alpha", formats.F32, nil, []float32{6})
			x, y := refLoRA(a1, b1, o, 3, i), refLoRA(a2, b2, o, 5, i)
			for k := range x {
				x[k] *= y[k] * 6.0 / 3
			}
			return x
		}},
		{"loha conv flattened", convName, conv, names.SD1, "", func(r *rand.Rand, m *memModel) []float64 {
			a1, b1, a2, b2 := randn(r, 12*2, 1), randn(r, 2*72, 1), randn(r, 12*2, 1), randn(r, 2*72, 1)
			p := "lora_unet_down_blocks_0_resnets_0_conv1"
			m.add(p+".hada_w1_a", formats.F32, []int64{12, 2}, a1)
			m.add(p+".hada_w1_b", formats.F32, []int64{2, 72}, b1)
			m.add(p+".hada_w2_a", formats.F32, []int64{12, 2}, a2)
			m.add(p+".hada_w2_b", formats.F32, []int64{2, 72}, b2)
			x, y := refLoRA(a1, b1, 12, 2, 72), refLoRA(a2, b2, 12, 2, 72)
			for k := range x {
				x[k] *= y[k]
			}
			return x
		}},
		{"loha tucker", convName, conv, names.SD1, "", func(r *rand.Rand, m *memModel) []float64 {
			p := "lora_unet_down_blocks_0_resnets_0_conv1"
			var ws [2][]float64
			for k, n := range []string{"1", "2"} {
				t, a, b := randn(r, 3*3*9, 1), randn(r, 3*12, 1), randn(r, 3*8, 1)
				m.add(p+".hada_t"+n, formats.F32, []int64{3, 3, 3, 3}, t)
				m.add(p+".hada_w"+n+"_a", formats.F32, []int64{3, 12}, a)
				m.add(p+".hada_w"+n+"_b", formats.F32, []int64{3, 8}, b)
				ws[k] = refTucker(t, a, b, 3, 3, 12, 8, 9)
			}
			m.add(p+".alpha", formats.F32, nil, []float32{3})
			for k := range ws[0] {
				ws[0][k] *= ws[1][k]
			}
			return ws[0]
		}},
		{"lokr full factors (scale 1 whatever alpha)", linName, lin, names.Flux, "", func(r *rand.Rand, m *memModel) []float64 {
			w1, w2 := randn(r, 4*5, 1), randn(r, 6*4, 1)
			p := "lycoris_transformer_blocks_0_attn_to_out_0"
			m.add(p+".lokr_w1", formats.F32, []int64{4, 5}, w1)
			m.add(p+".lokr_w2", formats.F32, []int64{6, 4}, w2)
			m.add(p+".alpha", formats.F32, nil, []float32{16})
			return refKron(to64(w1), 4, 5, to64(w2), 6, 4)
		}},
		{"lokr decomposed w1 and w2", linName, lin, names.Flux, "", func(r *rand.Rand, m *memModel) []float64 {
			w1a, w1b, w2a, w2b := randn(r, 4*2, 1), randn(r, 2*5, 1), randn(r, 6*2, 1), randn(r, 2*4, 1)
			p := "lora_unet_double_blocks_0_img_attn_proj"
			m.add(p+".lokr_w1_a", formats.F32, []int64{4, 2}, w1a)
			m.add(p+".lokr_w1_b", formats.F32, []int64{2, 5}, w1b)
			m.add(p+".lokr_w2_a", formats.F32, []int64{6, 2}, w2a)
			m.add(p+".lokr_w2_b", formats.F32, []int64{2, 4}, w2b)
			m.add(p+".alpha", formats.F32, nil, []float32{1})
			w1, w2 := refLoRA(w1a, w1b, 4, 2, 5), refLoRA(w2a, w2b, 6, 2, 4)
			return scale(refKron(w1, 4, 5, w2, 6, 4), 0.5)
		}},
		{"lokr conv, w2 with tucker core", convName, conv, names.SD1, "", func(r *rand.Rand, m *memModel) []float64 {
			// [12, 8, 3, 3] = w1 [3, 2] ⊗ w2 [4, 4, 3, 3].
			w1, t2, wa, wb := randn(r, 3*2, 1), randn(r, 2*2*9, 1), randn(r, 2*4, 1), randn(r, 2*4, 1)
			p := "lora_unet_down_blocks_0_resnets_0_conv1"
			m.add(p+".lokr_w1", formats.F32, []int64{3, 2}, w1)
			m.add(p+".lokr_t2", formats.F32, []int64{2, 2, 3, 3}, t2)
			m.add(p+".lokr_w2_a", formats.F32, []int64{2, 4}, wa)
			m.add(p+".lokr_w2_b", formats.F32, []int64{2, 4}, wb)
			m.add(p+".alpha", formats.F32, nil, []float32{1})
			w2 := refTucker(t2, wa, wb, 2, 2, 4, 4, 9)
			return scale(refKron(to64(w1), 3, 2, w2, 4, 36), 0.5)
		}},
		{"lokr conv, w2 flattened", convName, conv, names.SD1, "", func(r *rand.Rand, m *memModel) []float64 {
			w1, wa, wb := randn(r, 3*2, 1), randn(r, 4*2, 1), randn(r, 2*36, 1)
			p := "lora_unet_down_blocks_0_resnets_0_conv1"
			m.add(p+".lokr_w1", formats.F32, []int64{3, 2}, w1)
			m.add(p+".lokr_w2_a", formats.F32, []int64{4, 2}, wa)
			m.add(p+".lokr_w2_b", formats.F32, []int64{2, 36}, wb)
			w2 := refLoRA(wa, wb, 4, 2, 36)
			return refKron(to64(w1), 3, 2, w2, 4, 36)
		}},
		{"full diff", convName, conv, names.SD1, "", func(r *rand.Rand, m *memModel) []float64 {
			d := randn(r, 12*72, 1)
			m.add("lora_unet_down_blocks_0_resnets_0_conv1.diff", formats.F32, conv, d)
			return to64(d)
		}},
	}
}

func scale(d []float64, s float64) []float64 {
	for i := range d {
		d[i] *= s
	}
	return d
}

// TestProductsAgainstReference bakes each kind into a random base tensor
// at strength 0.7 and compares with base + 0.7·reference, for the whole
// tensor at once and in unaligned chunks.
func TestProductsAgainstReference(t *testing.T) {
	for ci, c := range numCases() {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 7))
			am := newMem("adapter.safetensors")
			ref := c.build(r, am)
			n := int(prod(c.shape))
			if len(ref) != n {
				t.Fatalf("reference has %d elements, tensor %d", len(ref), n)
			}
			base := randn(r, n, 1)
			p := matchOne(t, c.base, c.shape, c.v, am, 0.7)
			tg := p.Target(c.base)
			if tg == nil || len(p.Targets) != 1 || len(p.Unmatched) != 0 {
				t.Fatalf("targets %d, unmatched %v", len(p.Targets), p.Unmatched)
			}
			want := make([]float64, n)
			var norm float64
			for k := range want {
				want[k] = float64(base[k]) + 0.7*ref[k]
				norm = math.Max(norm, math.Abs(ref[k]))
			}
			whole := append([]float32{}, base...)
			if err := tg.AddTo(whole, 0); err != nil {
				t.Fatal(err)
			}
			checkClose(t, "whole", whole, want, 2e-6*norm+1e-6)
			// Chunks of 7 elements cut rows (of 20 or 72 elements) anywhere.
			chunked := append([]float32{}, base...)
			for off := 0; off < n; off += 7 {
				end := min(off+7, n)
				if err := tg.AddTo(chunked[off:end], int64(off)); err != nil {
					t.Fatal(err)
				}
			}
			checkClose(t, "chunked", chunked, want, 2e-6*norm+1e-6)
			tg.Release()
		})
	}
}

func matchOne(t *testing.T, name string, shape []int64, v names.Version, am *memModel, strength float64) *Plan {
	t.Helper()
	b, err := NewBase([]formats.Tensor{{Name: name, Type: formats.F32, Shape: shape}}, v, "")
	if err != nil {
		t.Fatal(err)
	}
	a, err := Read(am)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Match(Use{Adapter: a, Strength: strength})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func checkClose(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	worst, at := 0.0, 0
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > worst {
			worst, at = d, i
		}
	}
	if worst > tol {
		t.Errorf("%s: element %d is %v, want %v (error %.3g > %.3g)", what, at, got[at], want[at], worst, tol)
	}
}

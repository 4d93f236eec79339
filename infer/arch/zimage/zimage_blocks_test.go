//go:build cgo

package zimage

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/native"
)

// Z-Image's blocks against plain-Go references in float64: the RoPE
// positions with the pad tokens, a context refiner block (unmodulated) and
// a noise refiner block (modulated, with grouped key/value heads), and the
// patch layout.

func TestZImagePositions(t *testing.T) {
	const txt, rows, cols = 5, 3, 4 // 5 text tokens pad to 32, 12 patches to 32
	pos := zimagePositions(txt, rows, cols)
	if len(pos) != 64 {
		t.Fatalf("%d positions, want 64", len(pos))
	}
	for i, p := range pos {
		var want [3]float32
		switch {
		case i < 32: // text and its padding count up from 1 on the first axis
			want = [3]float32{float32(i + 1), 0, 0}
		case i < 32+rows*cols: // patches one past the padded text, at their row and column
			j := i - 32
			want = [3]float32{33, float32(j / cols), float32(j % cols)}
		} // the image's padding sits at the origin
		if p != want {
			t.Errorf("token %d at %v, want %v", i, p, want)
		}
	}
	if n := len(zimagePositions(32, 4, 8)); n != 64 {
		t.Errorf("whole multiples got padding: %d positions, want 64", n)
	}
	axes := []int{4, 6, 6}
	cos, sin := flux.RoPETable(axes, zimageTheta, pos)
	for tok, p := range pos {
		for k := 0; k < 8; k++ {
			a := inferutil.RefRoPEAngle(axes, zimageTheta, [3]float64{float64(p[0]), float64(p[1]), float64(p[2])}, k)
			if math.Abs(float64(cos[tok*8+k])-math.Cos(a)) > 1e-5 || math.Abs(float64(sin[tok*8+k])-math.Sin(a)) > 1e-5 {
				t.Fatalf("token %d pair %d: (%g, %g), want angle %g", tok, k, cos[tok*8+k], sin[tok*8+k], a)
			}
		}
	}
}

func TestZImagePatchify(t *testing.T) {
	const c, h, w, p = 3, 4, 6, 2
	x := make([]float32, c*h*w)
	for i := range x {
		x[i] = float32(i)
	}
	tok := zimagePatchify(x, c, h, w, p)
	// Token (i, j) holds its patch pixel by pixel, each pixel's channels together.
	for i := 0; i < h/p; i++ {
		for j := 0; j < w/p; j++ {
			for pr := 0; pr < p; pr++ {
				for pc := 0; pc < p; pc++ {
					for ch := 0; ch < c; ch++ {
						got := tok[(i*(w/p)+j)*p*p*c+(pr*p+pc)*c+ch]
						if want := x[ch*h*w+(i*p+pr)*w+j*p+pc]; got != want {
							t.Fatalf("patch (%d,%d) pixel (%d,%d) channel %d: %g, want %g", i, j, pr, pc, ch, got, want)
						}
					}
				}
			}
		}
	}
	back := zimageUnpatchify(tok, c, h, w, p, -1)
	for i := range x {
		if back[i] != -x[i] {
			t.Fatalf("value %d: %g after the round trip, want %g", i, back[i], -x[i])
		}
	}
}

// zimageRefBlock holds one block's weights for the reference.
type zimageRefBlock struct {
	w   map[string]inferutil.TestWeight
	cfg *ZImageConfig
	pfx string
}

// newZImageRefBlock draws the weights of block prefix pfx (with its
// modulation when mod is set).
func newZImageRefBlock(r *rand.Rand, cfg *ZImageConfig, pfx string, mod bool) *zimageRefBlock {
	h, d, ff := int64(cfg.Hidden), int64(cfg.HeadDim), int64(cfg.FF)
	qkv := int64(cfg.Heads+2*cfg.KVHeads) * d
	b := &zimageRefBlock{w: map[string]inferutil.TestWeight{}, cfg: cfg, pfx: pfx}
	add := func(name string, std float64, base float32, shape ...int64) {
		n := int64(1)
		for _, s := range shape {
			n *= s
		}
		data := inferutil.Randn(r, int(n), std)
		for i := range data {
			data[i] += base
		}
		b.w[pfx+name] = inferutil.TestWeight{Shape: shape, Typ: formats.F32, Data: data}
	}
	add("attention.qkv.weight", 1/math.Sqrt(float64(h)), 0, qkv, h)
	add("attention.out.weight", 1/math.Sqrt(float64(h)), 0, h, h)
	add("attention.q_norm.weight", 0.1, 1, d)
	add("attention.k_norm.weight", 0.1, 1, d)
	add("feed_forward.w1.weight", 1/math.Sqrt(float64(h)), 0, ff, h)
	add("feed_forward.w3.weight", 1/math.Sqrt(float64(h)), 0, ff, h)
	add("feed_forward.w2.weight", 1/math.Sqrt(float64(ff)), 0, h, ff)
	for _, n := range []string{"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"} {
		add(n+".weight", 0.1, 1, h)
	}
	if mod {
		add("adaLN_modulation.0.weight", 0.3, 0, 4*h, int64(cfg.TimeDim))
		add("adaLN_modulation.0.bias", 0.1, 0, 4*h)
	}
	return b
}

func (b *zimageRefBlock) get(name string) []float32 { return b.w[b.pfx+name].Data }

// zimageRefLinear is y = W·x (+ bias) for tokens x [L][in], W [out][in].
func zimageRefLinear(x []float32, w []float32, bias []float32, in int) []float32 {
	l, out := len(x)/in, len(w)/in
	y := make([]float32, l*out)
	for tok := 0; tok < l; tok++ {
		for o := 0; o < out; o++ {
			var acc float64
			if bias != nil {
				acc = float64(bias[o])
			}
			for i := 0; i < in; i++ {
				acc += float64(w[o*in+i]) * float64(x[tok*in+i])
			}
			y[tok*out+o] = float32(acc)
		}
	}
	return y
}

// zimageRefRMSNorm normalizes each row of n values to unit RMS and scales it by w.
func zimageRefRMSNorm(x, w []float32, n int, eps float64) []float32 {
	out := make([]float32, len(x))
	for r := 0; r < len(x)/n; r++ {
		var ss float64
		for _, v := range x[r*n : (r+1)*n] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(n)+eps)
		for i := 0; i < n; i++ {
			out[r*n+i] = float32(float64(x[r*n+i]) * inv * float64(w[i]))
		}
	}
	return out
}

// forward is the block on tokens x [L][h] with the RoPE table cos, sin and
// the time embedding temb (nil: unmodulated).
func (b *zimageRefBlock) forward(x, temb, cos, sin []float32) []float32 {
	cfg := b.cfg
	h, d, nh, nkv, ff := cfg.Hidden, cfg.HeadDim, cfg.Heads, cfg.KVHeads, cfg.FF
	l := len(x) / h
	var mod []float32 // scale_msa, gate_msa, scale_mlp, gate_mlp
	if temb != nil {
		mod = zimageRefLinear(temb, b.get("adaLN_modulation.0.weight"), b.get("adaLN_modulation.0.bias"), cfg.TimeDim)
	}
	sub := func(x []float32, n1, n2 string, f func([]float32) []float32, k int) []float32 {
		y := zimageRefRMSNorm(x, b.get(n1+".weight"), h, zimageNormEps)
		if mod != nil {
			for i := range y {
				y[i] *= 1 + mod[k*h+i%h]
			}
		}
		y = zimageRefRMSNorm(f(y), b.get(n2+".weight"), h, zimageNormEps)
		out := make([]float32, len(x))
		for i := range y {
			g := 1.0
			if mod != nil {
				g = math.Tanh(float64(mod[(k+1)*h+i%h]))
			}
			out[i] = float32(float64(y[i])*g + float64(x[i]))
		}
		return out
	}
	attn := func(y []float32) []float32 {
		t := zimageRefLinear(y, b.get("attention.qkv.weight"), nil, h)
		w := (nh + 2*nkv) * d
		q, k, v := make([]float32, 0, l*nh*d), make([]float32, 0, l*nh*d), make([]float32, 0, l*nh*d)
		for tok := 0; tok < l; tok++ {
			row := t[tok*w : (tok+1)*w]
			for hd := 0; hd < nh; hd++ {
				kv := hd / (nh / nkv) // query head hd reads key/value head kv
				q = append(q, zimageRefRMSNorm(row[hd*d:(hd+1)*d], b.get("attention.q_norm.weight"), d, flux.FluxNormEps)...)
				k = append(k, zimageRefRMSNorm(row[(nh+kv)*d:(nh+kv+1)*d], b.get("attention.k_norm.weight"), d, flux.FluxNormEps)...)
				v = append(v, row[(nh+nkv+kv)*d:(nh+nkv+kv+1)*d]...)
			}
		}
		a := inferutil.RefAttention(inferutil.RefRotate(q, l, nh, d, cos, sin), inferutil.RefRotate(k, l, nh, d, cos, sin), v, nh*d, l, l, nh, 1, false)
		return zimageRefLinear(a, b.get("attention.out.weight"), nil, nh*d)
	}
	ffn := func(y []float32) []float32 {
		a, g := zimageRefLinear(y, b.get("feed_forward.w1.weight"), nil, h), zimageRefLinear(y, b.get("feed_forward.w3.weight"), nil, h)
		for i := range a {
			s := float64(a[i])
			a[i] = float32(s / (1 + math.Exp(-s)) * float64(g[i]))
		}
		return zimageRefLinear(a, b.get("feed_forward.w2.weight"), nil, ff)
	}
	x = sub(x, "attention_norm1", "attention_norm2", attn, 0)
	return sub(x, "ffn_norm1", "ffn_norm2", ffn, 2)
}

func TestZImageRefinerBlocks(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(28, 3))
	cfg := &ZImageConfig{Hidden: 32, Heads: 4, KVHeads: 2, HeadDim: 8, FF: 48, TimeDim: 16, Axes: []int{2, 2, 4}, Theta: zimageTheta}
	const rows, cols = 2, 3
	pos := zimagePositions(0, rows, cols)[:rows*cols]
	cos, sin := flux.RoPETable(cfg.Axes, cfg.Theta, pos)
	l := len(pos)
	for _, tc := range []struct {
		name string
		mod  bool
	}{{"context_refiner.0.", false}, {"noise_refiner.1.", true}} {
		t.Run(tc.name, func(t *testing.T) {
			rb := newZImageRefBlock(r, cfg, tc.name, tc.mod)
			ws := inferutil.MakeWeights(t, be, rb.w)
			x, temb := inferutil.Randn(r, l*cfg.Hidden, 1), inferutil.Randn(r, cfg.TimeDim, 1)
			ins := []inferutil.TestInput{
				{Ne: []int64{int64(cfg.Hidden), int64(l)}, Data: x},
				{Ne: []int64{int64(cfg.HeadDim / 2), int64(l)}, Data: cos}, {Ne: []int64{int64(cfg.HeadDim / 2), int64(l)}, Data: sin},
			}
			if tc.mod { // an input the graph does not read is never allocated
				ins = append(ins, inferutil.TestInput{Ne: []int64{int64(cfg.TimeDim)}, Data: temb})
			}
			got, ne := inferutil.RunGraph(t, be, ws, ins, func(g *infer.Builder, in []native.Tensor) native.Tensor {
				te := native.Tensor{}
				if tc.mod {
					te = in[3]
				}
				return zimageBlock(g, cfg, tc.name, in[0], te, in[1], in[2])
			})
			if ne != [4]int64{int64(cfg.Hidden), int64(l), 1, 1} {
				t.Fatalf("output %v", ne)
			}
			var te []float32
			if tc.mod {
				te = temb
			}
			want := rb.forward(x, te, cos, sin)
			if e := inferutil.MaxRelErr(t, got, want); e > 1e-4 {
				t.Errorf("relative error %g", e)
			}
			// The block must change its input: the test sees the block.
			if e := inferutil.MaxRelErr(t, got, x); e < 1e-2 {
				t.Errorf("the block's output matches its input (%g)", e)
			}
		})
	}
}

// TestZImageDetect reads a configuration from shapes and refuses a block
// whose shape disagrees with block 0's.
func TestZImageDetect(t *testing.T) {
	p := infer.DmPrefix
	s := infer.Shapes{
		p + "x_embedder.weight": {64, 64}, p + "final_layer.linear.weight": {64, 64},
		p + "cap_embedder.0.weight": {40}, p + "cap_embedder.1.weight": {64, 40},
		p + "t_embedder.mlp.0.weight": {32, 256}, p + "t_embedder.mlp.2.weight": {16, 32},
		p + "final_layer.adaLN_modulation.1.weight": {64, 16},
		p + "x_pad_token": {1, 64}, p + "cap_pad_token": {1, 64},
	}
	block := func(b string, mod bool) {
		for n, sh := range map[string][]int64{
			"attention.qkv.weight": {128, 64}, "attention.out.weight": {64, 64}, "attention.q_norm.weight": {16},
			"attention.k_norm.weight": {16}, "feed_forward.w1.weight": {96, 64}, "feed_forward.w2.weight": {64, 96},
			"feed_forward.w3.weight": {96, 64}, "attention_norm1.weight": {64}, "attention_norm2.weight": {64},
			"ffn_norm1.weight": {64}, "ffn_norm2.weight": {64},
		} {
			s[p+b+n] = sh
		}
		if mod {
			s[p+b+"adaLN_modulation.0.weight"] = []int64{256, 16}
		}
	}
	block("context_refiner.0.", false)
	block("noise_refiner.0.", true)
	block("layers.0.", true)
	block("layers.1.", true)
	axes := formats.Metadata{{Key: MetaZImageAxes, Type: formats.TypeString, Value: "4,6,6"}}
	c, err := detectZImage(s, axes)
	if err != nil {
		t.Fatal(err)
	}
	want := ZImageConfig{Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Layers: 2, NoiseRefiners: 1, ContextRefiners: 1,
		FF: 96, InChannels: 16, OutChannels: 16, Patch: 2, CapDim: 40, TimeDim: 16, Theta: zimageTheta}
	c.Axes = nil
	if fmt.Sprint(*c) != fmt.Sprint(want) {
		t.Errorf("config %+v, want %+v", *c, want)
	}
	if _, err := detectZImage(s, nil); err == nil {
		t.Error("Z-Image's 128-wide axes accepted for 16-wide heads")
	}
	s[p+"layers.1.feed_forward.w2.weight"] = []int64{64, 64}
	if _, err := detectZImage(s, axes); err == nil {
		t.Error("a misshapen layers.1.feed_forward.w2 accepted")
	}
}

//go:build cgo

package sd3

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/native"
)

// The MMDiT's joint block against a plain-Go reference in float64, with
// 3.5 medium's image-only attention (attn2) and RMS QK norms; and the
// output patch layout.

// ref64 are float64 helpers over tokens [L][C].
type ref64 struct {
	w map[string]inferutil.TestWeight
}

func (r ref64) linear(x [][]float64, prefix string) [][]float64 {
	w, b := r.w[prefix+".weight"], r.w[prefix+".bias"]
	out := make([][]float64, len(x))
	for t, row := range x {
		out[t] = inferutil.RefLinear(w.Data, b.Data, row)
	}
	return out
}

func layerNorm64(row []float64, eps float64) []float64 {
	var mean, v float64
	for _, a := range row {
		mean += a
	}
	mean /= float64(len(row))
	for _, a := range row {
		v += (a - mean) * (a - mean)
	}
	v /= float64(len(row))
	out := make([]float64, len(row))
	for i, a := range row {
		out[i] = (a - mean) / math.Sqrt(v+eps)
	}
	return out
}

func gelu64(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// modulated is LN(x)·(1+scale)+shift per token.
func modulated(x [][]float64, shift, scale []float64) [][]float64 {
	out := make([][]float64, len(x))
	for t, row := range x {
		n := layerNorm64(row, sd3NormEps)
		for i := range n {
			n[i] = n[i]*(1+scale[i]) + shift[i]
		}
		out[t] = n
	}
	return out
}

// qkv is one attention's q, k, v with RMS-normed heads, flattened to float32 tokens.
func (r ref64) qkv(x [][]float64, prefix string, heads int) (q, k, v []float32) {
	t := r.linear(x, prefix+".qkv")
	h := len(t[0]) / 3
	d := h / heads
	for _, row := range t {
		for part, dst := range []*[]float32{&q, &k, &v} {
			seg := row[part*h : (part+1)*h]
			for hd := 0; hd < heads; hd++ {
				head := seg[hd*d : (hd+1)*d]
				if part < 2 {
					var ms float64
					for _, a := range head {
						ms += a * a
					}
					rms := math.Sqrt(ms/float64(d) + sd3NormEps)
					w := r.w[prefix+[]string{".ln_q", ".ln_k"}[part]+".weight"].Data
					for e, a := range head {
						*dst = append(*dst, float32(a/rms*float64(w[e])))
					}
				} else {
					for _, a := range head {
						*dst = append(*dst, float32(a))
					}
				}
			}
		}
	}
	return q, k, v
}

func tokens64(x []float32, h int) [][]float64 {
	out := make([][]float64, len(x)/h)
	for t := range out {
		out[t] = make([]float64, h)
		for i := range out[t] {
			out[t][i] = float64(x[t*h+i])
		}
	}
	return out
}

// addGated is x + y·gate per token.
func addGated(x, y [][]float64, gate []float64) [][]float64 {
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = make([]float64, len(x[t]))
		for i := range x[t] {
			out[t][i] = x[t][i] + y[t][i]*gate[i]
		}
	}
	return out
}

func (r ref64) mlp(x [][]float64, prefix string) [][]float64 {
	y := r.linear(x, prefix+".fc1")
	for _, row := range y {
		for i := range row {
			row[i] = gelu64(row[i])
		}
	}
	return r.linear(y, prefix+".fc2")
}

func TestSD3JointBlock(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	rng := rand.New(rand.NewPCG(31, 32))
	const h, heads, mlp, lc, lx = 16, 2, 32, 3, 4
	cfg := &SD3Config{Hidden: h, Heads: heads, HeadDim: h / heads, Depth: 2, XSelf: 1, QKNorm: "rms", MLP: mlp}
	w := map[string]inferutil.TestWeight{}
	lin := func(name string, out, in int) {
		w[name+".weight"] = inferutil.TestWeight{Shape: []int64{int64(out), int64(in)}, Typ: formats.F32, Data: inferutil.Randn(rng, out*in, 1/math.Sqrt(float64(in)))}
		w[name+".bias"] = inferutil.TestWeight{Shape: []int64{int64(out)}, Typ: formats.F32, Data: inferutil.Randn(rng, out, 0.1)}
	}
	p := infer.DmPrefix + "joint_blocks.0."
	for _, st := range []string{"context_block", "x_block"} {
		b := p + st + "."
		n := 6
		attns := []string{"attn"}
		if st == "x_block" {
			n, attns = 9, []string{"attn", "attn2"}
		}
		lin(b+"adaLN_modulation.1", n*h, h)
		for _, a := range attns {
			lin(b+a+".qkv", 3*h, h)
			lin(b+a+".proj", h, h)
			for _, nm := range []string{"ln_q", "ln_k"} {
				w[b+a+"."+nm+".weight"] = inferutil.TestWeight{Shape: []int64{h / heads}, Typ: formats.F32, Data: inferutil.Randn(rng, h/heads, 1)}
			}
		}
		lin(b+"mlp.fc1", mlp, h)
		lin(b+"mlp.fc2", h, mlp)
	}
	ws := inferutil.MakeWeights(t, be, w)
	ctx, x, c := inferutil.Randn(rng, lc*h, 1), inferutil.Randn(rng, lx*h, 1), inferutil.Randn(rng, h, 1)
	got, _ := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{h, lc}, Data: ctx}, {Ne: []int64{h, lx}, Data: x}, {Ne: []int64{h}, Data: c}},
		func(g *infer.Builder, in []native.Tensor) native.Tensor {
			co, xo := sd3Joint(g, cfg, 0, in[0], in[1], in[2])
			return g.Ctx.Concat(co, xo, 1)
		})

	r := ref64{w}
	c64 := make([]float64, h)
	for i, v := range c {
		c64[i] = float64(v) / (1 + math.Exp(-float64(v)))
	}
	mods := func(b string, n int) [][]float64 {
		m := inferutil.RefLinear(w[b+"adaLN_modulation.1.weight"].Data, w[b+"adaLN_modulation.1.bias"].Data, c64)
		out := make([][]float64, n)
		for i := range out {
			out[i] = m[i*h : (i+1)*h]
		}
		return out
	}
	cb, xb := p+"context_block.", p+"x_block."
	cm, xm := mods(cb, 6), mods(xb, 9)
	C, X := tokens64(ctx, h), tokens64(x, h)
	cq, ck, cv := r.qkv(modulated(C, cm[0], cm[1]), cb+"attn", heads)
	xq, xk, xv := r.qkv(modulated(X, xm[0], xm[1]), xb+"attn", heads)
	a := tokens64(inferutil.RefAttention(append(cq, xq...), append(ck, xk...), append(cv, xv...), h, lc+lx, lc+lx, heads, 1, false), h)
	q2, k2, v2 := r.qkv(modulated(X, xm[6], xm[7]), xb+"attn2", heads)
	a2 := tokens64(inferutil.RefAttention(q2, k2, v2, h, lx, lx, heads, 1, false), h)
	C = addGated(C, r.linear(a[:lc], cb+"attn.proj"), cm[2])
	C = addGated(C, r.mlp(modulated(C, cm[3], cm[4]), cb+"mlp"), cm[5])
	X = addGated(X, r.linear(a[lc:], xb+"attn.proj"), xm[2])
	flat := func(rows [][]float64) []float32 {
		var out []float32
		for _, row := range rows {
			for _, v := range row {
				out = append(out, float32(v))
			}
		}
		return out
	}
	// The same block without attn2, to show that the test sees it.
	noSelf := flat(append(C, addGated(X, r.mlp(modulated(X, xm[3], xm[4]), xb+"mlp"), xm[5])...))
	X = addGated(X, r.linear(a2, xb+"attn2.proj"), xm[8])
	X = addGated(X, r.mlp(modulated(X, xm[3], xm[4]), xb+"mlp"), xm[5])
	want := flat(append(C, X...))
	// ggml's GELU reads a float16 table (2e-4 measured here).
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-3 {
		t.Errorf("relative error %g", e)
	}
	if e := inferutil.MaxRelErr(t, got, noSelf); e < 1e-2 {
		t.Errorf("the block matches the reference without attn2 (%g)", e)
	}
}

func TestUnpatchifyLast(t *testing.T) {
	const c, h, w, p = 3, 4, 6, 2
	tok := make([]float32, c*h*w)
	for i := range tok {
		tok[i] = float32(i)
	}
	x := unpatchifyLast(tok, c, h, w, p)
	for i := 0; i < h/p; i++ {
		for j := 0; j < w/p; j++ {
			for pr := 0; pr < p; pr++ {
				for pc := 0; pc < p; pc++ {
					for ch := 0; ch < c; ch++ {
						got := x[(ch*h+i*p+pr)*w+j*p+pc]
						want := tok[(i*(w/p)+j)*p*p*c+(pr*p+pc)*c+ch]
						if got != want {
							t.Fatalf("patch (%d, %d) (%d, %d) channel %d: %g, want %g", i, j, pr, pc, ch, got, want)
						}
					}
				}
			}
		}
	}
}

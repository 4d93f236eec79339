//go:build cgo

package infer_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/native"
)

// Building blocks against plain-Go references on small random tensors.
// Data is in PyTorch order everywhere (which is ggml's order read
// innermost first), so references index it as PyTorch would.

func TestConv2D(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name                  string
		typ                   formats.DType
		ic, oc, h, w, k, strd int
		tol                   float64
	}{
		{"3x3 s1 f32", formats.F32, 5, 7, 9, 6, 3, 1, 1e-5},
		{"3x3 s2 f32 (downsample)", formats.F32, 4, 6, 8, 10, 3, 2, 1e-5},
		{"3x3 s2 odd f32", formats.F32, 3, 2, 7, 5, 3, 2, 1e-5},
		{"1x1 f32", formats.F32, 8, 3, 4, 4, 1, 1, 1e-5},
		{"3x3 s1 f16", formats.F16, 6, 4, 5, 7, 3, 1, 3e-3},
	} {
		t.Run(c.name, func(t *testing.T) {
			kw := inferutil.TestWeight{Shape: []int64{int64(c.oc), int64(c.ic), int64(c.k), int64(c.k)}, Typ: c.typ, Data: inferutil.Randn(r, c.oc*c.ic*c.k*c.k, 0.3)}
			bw := inferutil.TestWeight{Shape: []int64{int64(c.oc)}, Typ: formats.F32, Data: inferutil.Randn(r, c.oc, 0.1)}
			ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{"c.weight": kw, "c.bias": bw})
			x := inferutil.Randn(r, c.ic*c.h*c.w, 1)
			got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{int64(c.w), int64(c.h), int64(c.ic), 1}, Data: x}},
				func(g *infer.Builder, in []native.Tensor) native.Tensor { return g.Conv2d(in[0], "c", c.strd) })
			want, oh, ow := inferutil.RefConv2D(x, 1, c.ic, c.h, c.w, inferutil.Stored(t, kw), c.oc, c.k, c.k, bw.Data, c.strd, c.k/2)
			if ne != [4]int64{int64(ow), int64(oh), int64(c.oc), 1} {
				t.Fatalf("output dims %v, want [%d %d %d 1]", ne, ow, oh, c.oc)
			}
			if e := inferutil.MaxRelErr(t, got, want); e > c.tol {
				t.Errorf("relative error %g > %g", e, c.tol)
			}
		})
	}
}

func TestGroupNorm(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	const n, ch, h, w, eps = 2, 64, 3, 5, 1e-5
	gw := inferutil.TestWeight{Shape: []int64{ch}, Typ: formats.F32, Data: inferutil.Randn(r, ch, 1)}
	gb := inferutil.TestWeight{Shape: []int64{ch}, Typ: formats.F32, Data: inferutil.Randn(r, ch, 1)}
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{"n.weight": gw, "n.bias": gb})
	x := inferutil.Randn(r, n*ch*h*w, 2)
	for i := range x {
		x[i] += float32(i % 7) // a per-group offset the norm must remove
	}
	got, _ := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{w, h, ch, n}, Data: x}},
		func(g *infer.Builder, in []native.Tensor) native.Tensor { return g.GroupNorm(in[0], "n", eps) })
	want := make([]float32, len(x))
	per := ch / 32 * h * w
	for b := 0; b < n; b++ {
		for grp := 0; grp < 32; grp++ {
			off := (b*ch + grp*(ch/32)) * h * w
			var mean, v float64
			for i := 0; i < per; i++ {
				mean += float64(x[off+i])
			}
			mean /= float64(per)
			for i := 0; i < per; i++ {
				d := float64(x[off+i]) - mean
				v += d * d
			}
			v /= float64(per)
			for i := 0; i < per; i++ {
				c := grp*(ch/32) + i/(h*w)
				want[off+i] = float32((float64(x[off+i])-mean)/math.Sqrt(v+eps)*float64(gw.Data[c]) + float64(gb.Data[c]))
			}
		}
	}
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

func TestLayerNorm(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(5, 6))
	const d, l, eps = 48, 5, 1e-5
	lw := inferutil.TestWeight{Shape: []int64{d}, Typ: formats.F32, Data: inferutil.Randn(r, d, 1)}
	lb := inferutil.TestWeight{Shape: []int64{d}, Typ: formats.F32, Data: inferutil.Randn(r, d, 1)}
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{"ln.weight": lw, "ln.bias": lb})
	x := inferutil.Randn(r, d*l, 3)
	got, _ := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{d, l}, Data: x}},
		func(g *infer.Builder, in []native.Tensor) native.Tensor { return g.LayerNorm(in[0], "ln", eps) })
	want := make([]float32, len(x))
	for i := 0; i < l; i++ {
		row := x[i*d : (i+1)*d]
		var mean, v float64
		for _, f := range row {
			mean += float64(f)
		}
		mean /= d
		for _, f := range row {
			v += (float64(f) - mean) * (float64(f) - mean)
		}
		v /= d
		for j, f := range row {
			want[i*d+j] = float32((float64(f)-mean)/math.Sqrt(v+eps)*float64(lw.Data[j]) + float64(lb.Data[j]))
		}
	}
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

func TestAttention(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(7, 8))
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{})
	for _, c := range []struct {
		name                 string
		ch, lq, lk, heads, n int
		causal               bool
	}{
		{"one head", 16, 5, 7, 1, 1, false},
		{"four heads batch 2", 32, 6, 9, 4, 2, false},
		{"causal two heads", 16, 6, 6, 2, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := inferutil.Randn(r, c.n*c.lq*c.ch, 1)
			k := inferutil.Randn(r, c.n*c.lk*c.ch, 1)
			v := inferutil.Randn(r, c.n*c.lk*c.ch, 1)
			got, _ := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{
				{Ne: []int64{int64(c.ch), int64(c.lq), int64(c.n)}, Data: q},
				{Ne: []int64{int64(c.ch), int64(c.lk), int64(c.n)}, Data: k},
				{Ne: []int64{int64(c.ch), int64(c.lk), int64(c.n)}, Data: v},
			}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
				return infer.Attention(g.Ctx, in[0], in[1], in[2], c.heads, c.causal)
			})
			want := inferutil.RefAttention(q, k, v, c.ch, c.lq, c.lk, c.heads, c.n, c.causal)
			if e := inferutil.MaxRelErr(t, got, want); e > 1e-5 {
				t.Errorf("relative error %g", e)
			}
		})
	}
}

func TestGEGLU(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(9, 10))
	const in, inner, l = 16, 12, 5
	pw := inferutil.TestWeight{Shape: []int64{2 * inner, in}, Typ: formats.F32, Data: inferutil.Randn(r, 2*inner*in, 0.5)}
	pb := inferutil.TestWeight{Shape: []int64{2 * inner}, Typ: formats.F32, Data: inferutil.Randn(r, 2*inner, 0.1)}
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{"p.weight": pw, "p.bias": pb})
	x := inferutil.Randn(r, in*l, 1)
	got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{in, l}, Data: x}},
		func(g *infer.Builder, ins []native.Tensor) native.Tensor { return g.Geglu(ins[0], "p") })
	if ne[0] != inner || ne[1] != l {
		t.Fatalf("dims %v", ne)
	}
	want := make([]float32, inner*l)
	for i := 0; i < l; i++ {
		proj := make([]float64, 2*inner)
		for o := range proj {
			s := float64(pb.Data[o])
			for j := 0; j < in; j++ {
				s += float64(pw.Data[o*in+j]) * float64(x[i*in+j])
			}
			proj[o] = s
		}
		for o := 0; o < inner; o++ {
			want[i*inner+o] = float32(proj[o] * inferutil.GELUTanh(proj[inner+o]))
		}
	}
	// ggml's GELU reads a table indexed by the f16 rounding of its input.
	if e := inferutil.MaxRelErr(t, got, want); e > 5e-3 {
		t.Errorf("relative error %g", e)
	}
}

func TestUpsampleNearest(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{})
	r := rand.New(rand.NewPCG(11, 12))
	const w, h, c = 3, 2, 4
	x := inferutil.Randn(r, w*h*c, 1)
	got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{w, h, c, 1}, Data: x}},
		func(g *infer.Builder, in []native.Tensor) native.Tensor { return g.Ctx.UpscaleNearest(in[0], 2) })
	if ne != [4]int64{2 * w, 2 * h, c, 1} {
		t.Fatalf("dims %v", ne)
	}
	for ch := 0; ch < c; ch++ {
		for y := 0; y < 2*h; y++ {
			for xx := 0; xx < 2*w; xx++ {
				if g, want := got[(ch*2*h+y)*2*w+xx], x[(ch*h+y/2)*w+xx/2]; g != want {
					t.Fatalf("(%d,%d,%d) = %g, want %g", ch, y, xx, g, want)
				}
			}
		}
	}
}

func TestTimestepEmbedding(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{})
	ts := []float32{0, 1, 500, 999}
	const dim = 32
	got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{int64(len(ts))}, Data: ts}},
		func(g *infer.Builder, in []native.Tensor) native.Tensor {
			return g.Ctx.TimestepEmbedding(in[0], dim, 10000)
		})
	if ne[0] != dim || ne[1] != int64(len(ts)) {
		t.Fatalf("dims %v", ne)
	}
	// LDM's timestep_embedding: cos first (flip_sin_to_cos), frequencies exp(-ln(10000)·j/half).
	for i, tv := range ts {
		for j := 0; j < dim/2; j++ {
			f := math.Exp(-math.Log(10000) * float64(j) / (dim / 2))
			wc, wsn := math.Cos(float64(tv)*f), math.Sin(float64(tv)*f)
			if d := math.Abs(float64(got[i*dim+j]) - wc); d > 1e-4 {
				t.Errorf("t=%g cos[%d] = %g, want %g", tv, j, got[i*dim+j], wc)
			}
			if d := math.Abs(float64(got[i*dim+dim/2+j]) - wsn); d > 1e-4 {
				t.Errorf("t=%g sin[%d] = %g, want %g", tv, j, got[i*dim+dim/2+j], wsn)
			}
		}
	}
}

func TestLinearTypes(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(13, 14))
	const in, out, l = 512, 8, 3
	for _, c := range []struct {
		typ formats.DType
		tol float64
	}{
		{formats.F32, 1e-5}, {formats.F16, 2e-3}, {formats.Q8_0, 2e-2}, {formats.Q4_K, 3e-2},
	} {
		t.Run(c.typ.String(), func(t *testing.T) {
			lw := inferutil.TestWeight{Shape: []int64{out, in}, Typ: c.typ, Data: inferutil.Randn(r, out*in, 0.05)}
			lb := inferutil.TestWeight{Shape: []int64{out}, Typ: formats.F32, Data: inferutil.Randn(r, out, 0.1)}
			ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{"l.weight": lw, "l.bias": lb})
			x := inferutil.Randn(r, in*l, 1)
			got, _ := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{in, l}, Data: x}},
				func(g *infer.Builder, ins []native.Tensor) native.Tensor { return g.Linear(ins[0], "l") })
			w := inferutil.Stored(t, lw)
			want := make([]float32, out*l)
			for i := 0; i < l; i++ {
				for o := 0; o < out; o++ {
					s := float64(lb.Data[o])
					for j := 0; j < in; j++ {
						s += float64(w[o*in+j]) * float64(x[i*in+j])
					}
					want[i*out+o] = float32(s)
				}
			}
			// Quantized weights multiply activations that ggml rounds to q8 blocks first.
			if e := inferutil.MaxRelErr(t, got, want); e > c.tol {
				t.Errorf("relative error %g > %g", e, c.tol)
			}
		})
	}
}

func TestShapeErrorsDoNotAbort(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{
		"l.weight": {Shape: []int64{4, 16}, Typ: formats.F32, Data: make([]float32, 64)},
	})
	ctx, err := native.NewContext(64, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free()
	x, _ := ctx.NewTensor(formats.F32, 8, 2)
	g := &infer.Builder{Ctx: ctx, Weights: ws}
	func() {
		defer native.Recover(&err)
		g.Linear(x, "l")
	}()
	if err == nil {
		t.Error("mul_mat of [16,4] with [8,2] accepted")
	}
	err = nil
	func() {
		defer native.Recover(&err)
		g.Linear(x, "missing")
	}()
	if err == nil {
		t.Error("a missing weight was not reported")
	}
	// ggml aborts on an F16 second operand of an F32 add; the binding refuses it.
	h, _ := ctx.NewTensor(formats.F16, 8, 2)
	err = nil
	func() {
		defer native.Recover(&err)
		ctx.Add(x, h)
	}()
	if err == nil {
		t.Error("f32 + f16 was not refused")
	}
}

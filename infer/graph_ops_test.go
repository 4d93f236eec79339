//go:build cgo

package infer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/quant"
)

// Building blocks against plain-Go references on small random tensors.
// Data is in PyTorch order everywhere (which is ggml's order read
// innermost first), so references index it as PyTorch would.

type testWeight struct {
	shape []int64 // PyTorch order
	typ   formats.DType
	data  []float32
}

func newTestBackend(t *testing.T) *native.Backend {
	t.Helper()
	be, err := native.NewCPUBackend(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Free)
	return be
}

// makeWeights encodes the weights into their types and loads them.
func makeWeights(t *testing.T, be *native.Backend, w map[string]testWeight) *weightSet {
	t.Helper()
	ctx, err := native.NewContext(len(w)+1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ws := &weightSet{ctx: ctx, byName: map[string]native.Tensor{}, types: map[string]formats.DType{}}
	for name, tw := range w {
		typ := tw.typ
		if typ == 0 && tw.typ != formats.F32 {
			typ = formats.F32
		}
		tt, err := ctx.NewTensor(typ, ggmlDims(tw.shape)...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ws.byName[name] = tt
	}
	if len(w) == 0 {
		t.Cleanup(ws.free)
		return ws // ggml allocates no buffer for an empty context
	}
	if ws.buf, err = be.AllocContext(ctx); err != nil {
		t.Fatal(err)
	}
	for name, tw := range w {
		tt := ws.byName[name]
		enc, err := quant.Encoder(tt.Type())
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, tt.Bytes())
		rl := int(tw.shape[len(tw.shape)-1])
		rb := len(buf) / (len(tw.data) / rl)
		for r := 0; r < len(tw.data)/rl; r++ {
			enc.Quantize(buf[r*rb:(r+1)*rb], tw.data[r*rl:(r+1)*rl], nil)
		}
		if err := tt.SetData(buf); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(ws.free)
	return ws
}

// stored returns the values a weight holds after encoding (the reference
// computes with them, so that only the kernel's own error is measured).
func stored(t *testing.T, tw testWeight) []float32 {
	t.Helper()
	if tw.typ == formats.F32 {
		return tw.data
	}
	enc, _ := quant.Encoder(tw.typ)
	dec, _ := quant.Decoder(tw.typ)
	rl := int(tw.shape[len(tw.shape)-1])
	rb, _ := tw.typ.RowBytes(int64(rl))
	out := make([]float32, len(tw.data))
	buf := make([]byte, rb)
	for r := 0; r < len(tw.data)/rl; r++ {
		enc.Quantize(buf, tw.data[r*rl:(r+1)*rl], nil)
		dec.Dequantize(out[r*rl:(r+1)*rl], buf)
	}
	return out
}

type testInput struct {
	ne   []int64 // ggml dims
	data []float32
}

// runGraph builds out from inputs and weights, computes it and returns its values.
func runGraph(t *testing.T, be *native.Backend, ws *weightSet, inputs []testInput, build func(g *builder, in []native.Tensor) native.Tensor) ([]float32, [4]int64) {
	t.Helper()
	ctx, err := native.NewContext(8192, 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free()
	var in []native.Tensor
	for _, x := range inputs {
		tt, err := ctx.NewTensor(formats.F32, x.ne...)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, tt.SetInput())
	}
	g := &builder{c: ctx, w: ws}
	var out native.Tensor
	func() {
		defer native.Recover(&err)
		out = build(g, in)
		out = ctx.Cont(out)
	}()
	if err != nil {
		t.Fatal(err)
	}
	out.SetOutput()
	gr := ctx.NewGraph(8192)
	gr.Expand(out)
	alloc := be.NewAllocator()
	defer alloc.Free()
	if err := alloc.Alloc(gr); err != nil {
		t.Fatal(err)
	}
	for i, x := range inputs {
		if err := in[i].SetF32(x.data); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range g.consts {
		if err := c.t.SetF32(c.f32); err != nil {
			t.Fatal(err)
		}
	}
	if err := be.Compute(gr); err != nil {
		t.Fatal(err)
	}
	v, err := out.F32()
	if err != nil {
		t.Fatal(err)
	}
	return v, out.Ne()
}

func randn(r *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	return v
}

// maxRelErr is max|got-want| / max|want|.
func maxRelErr(t *testing.T, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	var d, m float64
	for i := range got {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		m = math.Max(m, math.Abs(float64(want[i])))
	}
	if m == 0 {
		return d
	}
	return d / m
}

func refConv2D(x []float32, n, ic, h, w int, k []float32, oc, kh, kw int, bias []float32, stride, pad int) ([]float32, int, int) {
	oh := (h+2*pad-kh)/stride + 1
	ow := (w+2*pad-kw)/stride + 1
	out := make([]float32, n*oc*oh*ow)
	for b := 0; b < n; b++ {
		for o := 0; o < oc; o++ {
			for y := 0; y < oh; y++ {
				for xx := 0; xx < ow; xx++ {
					s := float64(bias[o])
					for c := 0; c < ic; c++ {
						for i := 0; i < kh; i++ {
							for j := 0; j < kw; j++ {
								iy, ix := y*stride-pad+i, xx*stride-pad+j
								if iy < 0 || iy >= h || ix < 0 || ix >= w {
									continue
								}
								s += float64(x[((b*ic+c)*h+iy)*w+ix]) * float64(k[((o*ic+c)*kh+i)*kw+j])
							}
						}
					}
					out[((b*oc+o)*oh+y)*ow+xx] = float32(s)
				}
			}
		}
	}
	return out, oh, ow
}

func TestConv2D(t *testing.T) {
	be := newTestBackend(t)
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
			kw := testWeight{shape: []int64{int64(c.oc), int64(c.ic), int64(c.k), int64(c.k)}, typ: c.typ, data: randn(r, c.oc*c.ic*c.k*c.k, 0.3)}
			bw := testWeight{shape: []int64{int64(c.oc)}, typ: formats.F32, data: randn(r, c.oc, 0.1)}
			ws := makeWeights(t, be, map[string]testWeight{"c.weight": kw, "c.bias": bw})
			x := randn(r, c.ic*c.h*c.w, 1)
			got, ne := runGraph(t, be, ws, []testInput{{[]int64{int64(c.w), int64(c.h), int64(c.ic), 1}, x}},
				func(g *builder, in []native.Tensor) native.Tensor { return g.conv2d(in[0], "c", c.strd) })
			want, oh, ow := refConv2D(x, 1, c.ic, c.h, c.w, stored(t, kw), c.oc, c.k, c.k, bw.data, c.strd, c.k/2)
			if ne != [4]int64{int64(ow), int64(oh), int64(c.oc), 1} {
				t.Fatalf("output dims %v, want [%d %d %d 1]", ne, ow, oh, c.oc)
			}
			if e := maxRelErr(t, got, want); e > c.tol {
				t.Errorf("relative error %g > %g", e, c.tol)
			}
		})
	}
}

func TestGroupNorm(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	const n, ch, h, w, eps = 2, 64, 3, 5, 1e-5
	gw := testWeight{shape: []int64{ch}, typ: formats.F32, data: randn(r, ch, 1)}
	gb := testWeight{shape: []int64{ch}, typ: formats.F32, data: randn(r, ch, 1)}
	ws := makeWeights(t, be, map[string]testWeight{"n.weight": gw, "n.bias": gb})
	x := randn(r, n*ch*h*w, 2)
	for i := range x {
		x[i] += float32(i % 7) // a per-group offset the norm must remove
	}
	got, _ := runGraph(t, be, ws, []testInput{{[]int64{w, h, ch, n}, x}},
		func(g *builder, in []native.Tensor) native.Tensor { return g.groupNorm(in[0], "n", eps) })
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
				want[off+i] = float32((float64(x[off+i])-mean)/math.Sqrt(v+eps)*float64(gw.data[c]) + float64(gb.data[c]))
			}
		}
	}
	if e := maxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

func TestLayerNorm(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(5, 6))
	const d, l, eps = 48, 5, 1e-5
	lw := testWeight{shape: []int64{d}, typ: formats.F32, data: randn(r, d, 1)}
	lb := testWeight{shape: []int64{d}, typ: formats.F32, data: randn(r, d, 1)}
	ws := makeWeights(t, be, map[string]testWeight{"ln.weight": lw, "ln.bias": lb})
	x := randn(r, d*l, 3)
	got, _ := runGraph(t, be, ws, []testInput{{[]int64{d, l}, x}},
		func(g *builder, in []native.Tensor) native.Tensor { return g.layerNorm(in[0], "ln", eps) })
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
			want[i*d+j] = float32((float64(f)-mean)/math.Sqrt(v+eps)*float64(lw.data[j]) + float64(lb.data[j]))
		}
	}
	if e := maxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

func refAttention(q, k, v []float32, ch, lq, lk, heads, n int, causal bool) []float32 {
	d := ch / heads
	out := make([]float32, n*lq*ch)
	scale := 1 / math.Sqrt(float64(d))
	for b := 0; b < n; b++ {
		for h := 0; h < heads; h++ {
			for i := 0; i < lq; i++ {
				s := make([]float64, lk)
				m := math.Inf(-1)
				for j := 0; j < lk; j++ {
					if causal && j > i {
						s[j] = math.Inf(-1)
						continue
					}
					var dot float64
					for e := 0; e < d; e++ {
						dot += float64(q[(b*lq+i)*ch+h*d+e]) * float64(k[(b*lk+j)*ch+h*d+e])
					}
					s[j] = dot * scale
					m = math.Max(m, s[j])
				}
				var z float64
				for j := range s {
					s[j] = math.Exp(s[j] - m)
					z += s[j]
				}
				for e := 0; e < d; e++ {
					var acc float64
					for j := 0; j < lk; j++ {
						acc += s[j] / z * float64(v[(b*lk+j)*ch+h*d+e])
					}
					out[(b*lq+i)*ch+h*d+e] = float32(acc)
				}
			}
		}
	}
	return out
}

func TestAttention(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(7, 8))
	ws := makeWeights(t, be, map[string]testWeight{})
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
			q := randn(r, c.n*c.lq*c.ch, 1)
			k := randn(r, c.n*c.lk*c.ch, 1)
			v := randn(r, c.n*c.lk*c.ch, 1)
			got, _ := runGraph(t, be, ws, []testInput{
				{[]int64{int64(c.ch), int64(c.lq), int64(c.n)}, q},
				{[]int64{int64(c.ch), int64(c.lk), int64(c.n)}, k},
				{[]int64{int64(c.ch), int64(c.lk), int64(c.n)}, v},
			}, func(g *builder, in []native.Tensor) native.Tensor {
				return attention(g.c, in[0], in[1], in[2], c.heads, c.causal)
			})
			want := refAttention(q, k, v, c.ch, c.lq, c.lk, c.heads, c.n, c.causal)
			if e := maxRelErr(t, got, want); e > 1e-5 {
				t.Errorf("relative error %g", e)
			}
		})
	}
}

func geluTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

func TestGEGLU(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(9, 10))
	const in, inner, l = 16, 12, 5
	pw := testWeight{shape: []int64{2 * inner, in}, typ: formats.F32, data: randn(r, 2*inner*in, 0.5)}
	pb := testWeight{shape: []int64{2 * inner}, typ: formats.F32, data: randn(r, 2*inner, 0.1)}
	ws := makeWeights(t, be, map[string]testWeight{"p.weight": pw, "p.bias": pb})
	x := randn(r, in*l, 1)
	got, ne := runGraph(t, be, ws, []testInput{{[]int64{in, l}, x}},
		func(g *builder, ins []native.Tensor) native.Tensor { return g.geglu(ins[0], "p") })
	if ne[0] != inner || ne[1] != l {
		t.Fatalf("dims %v", ne)
	}
	want := make([]float32, inner*l)
	for i := 0; i < l; i++ {
		proj := make([]float64, 2*inner)
		for o := range proj {
			s := float64(pb.data[o])
			for j := 0; j < in; j++ {
				s += float64(pw.data[o*in+j]) * float64(x[i*in+j])
			}
			proj[o] = s
		}
		for o := 0; o < inner; o++ {
			want[i*inner+o] = float32(proj[o] * geluTanh(proj[inner+o]))
		}
	}
	// ggml's GELU reads a table indexed by the f16 rounding of its input.
	if e := maxRelErr(t, got, want); e > 5e-3 {
		t.Errorf("relative error %g", e)
	}
}

func TestUpsampleNearest(t *testing.T) {
	be := newTestBackend(t)
	ws := makeWeights(t, be, map[string]testWeight{})
	r := rand.New(rand.NewPCG(11, 12))
	const w, h, c = 3, 2, 4
	x := randn(r, w*h*c, 1)
	got, ne := runGraph(t, be, ws, []testInput{{[]int64{w, h, c, 1}, x}},
		func(g *builder, in []native.Tensor) native.Tensor { return g.c.UpscaleNearest(in[0], 2) })
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
	be := newTestBackend(t)
	ws := makeWeights(t, be, map[string]testWeight{})
	ts := []float32{0, 1, 500, 999}
	const dim = 32
	got, ne := runGraph(t, be, ws, []testInput{{[]int64{int64(len(ts))}, ts}},
		func(g *builder, in []native.Tensor) native.Tensor { return g.c.TimestepEmbedding(in[0], dim, 10000) })
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
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(13, 14))
	const in, out, l = 512, 8, 3
	for _, c := range []struct {
		typ formats.DType
		tol float64
	}{
		{formats.F32, 1e-5}, {formats.F16, 2e-3}, {formats.Q8_0, 2e-2}, {formats.Q4_K, 3e-2},
	} {
		t.Run(c.typ.String(), func(t *testing.T) {
			lw := testWeight{shape: []int64{out, in}, typ: c.typ, data: randn(r, out*in, 0.05)}
			lb := testWeight{shape: []int64{out}, typ: formats.F32, data: randn(r, out, 0.1)}
			ws := makeWeights(t, be, map[string]testWeight{"l.weight": lw, "l.bias": lb})
			x := randn(r, in*l, 1)
			got, _ := runGraph(t, be, ws, []testInput{{[]int64{in, l}, x}},
				func(g *builder, ins []native.Tensor) native.Tensor { return g.linear(ins[0], "l") })
			w := stored(t, lw)
			want := make([]float32, out*l)
			for i := 0; i < l; i++ {
				for o := 0; o < out; o++ {
					s := float64(lb.data[o])
					for j := 0; j < in; j++ {
						s += float64(w[o*in+j]) * float64(x[i*in+j])
					}
					want[i*out+o] = float32(s)
				}
			}
			// Quantized weights multiply activations that ggml rounds to q8 blocks first.
			if e := maxRelErr(t, got, want); e > c.tol {
				t.Errorf("relative error %g > %g", e, c.tol)
			}
		})
	}
}

func TestShapeErrorsDoNotAbort(t *testing.T) {
	be := newTestBackend(t)
	ws := makeWeights(t, be, map[string]testWeight{
		"l.weight": {shape: []int64{4, 16}, typ: formats.F32, data: make([]float32, 64)},
	})
	ctx, err := native.NewContext(64, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free()
	x, _ := ctx.NewTensor(formats.F32, 8, 2)
	g := &builder{c: ctx, w: ws}
	func() {
		defer native.Recover(&err)
		g.linear(x, "l")
	}()
	if err == nil {
		t.Error("mul_mat of [16,4] with [8,2] accepted")
	}
	err = nil
	func() {
		defer native.Recover(&err)
		g.linear(x, "missing")
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

// OpenCLIP's fused in_proj gives the same text encoder output as the same
// weights split into q_proj, k_proj and v_proj.
func TestCLIPFusedQKVMatchesSplit(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(15, 16))
	const h, ff, vocab, pos = 32, 64, 20, 8
	p := clipPrefix
	l := p + "encoder.layers.0."
	common := map[string]testWeight{
		p + "embeddings.token_embedding.weight":    {shape: []int64{vocab, h}, typ: formats.F32, data: randn(r, vocab*h, 1)},
		p + "embeddings.position_embedding.weight": {shape: []int64{pos, h}, typ: formats.F32, data: randn(r, pos*h, 0.1)},
		l + "self_attn.out_proj.weight":            {shape: []int64{h, h}, typ: formats.F32, data: randn(r, h*h, 0.2)},
		l + "self_attn.out_proj.bias":              {shape: []int64{h}, typ: formats.F32, data: randn(r, h, 0.1)},
		l + "mlp.fc1.weight":                       {shape: []int64{ff, h}, typ: formats.F32, data: randn(r, ff*h, 0.2)},
		l + "mlp.fc1.bias":                         {shape: []int64{ff}, typ: formats.F32, data: randn(r, ff, 0.1)},
		l + "mlp.fc2.weight":                       {shape: []int64{h, ff}, typ: formats.F32, data: randn(r, ff*h, 0.2)},
		l + "mlp.fc2.bias":                         {shape: []int64{h}, typ: formats.F32, data: randn(r, h, 0.1)},
	}
	for _, n := range []string{l + "layer_norm1", l + "layer_norm2", p + "final_layer_norm"} {
		common[n+".weight"] = testWeight{shape: []int64{h}, typ: formats.F32, data: randn(r, h, 1)}
		common[n+".bias"] = testWeight{shape: []int64{h}, typ: formats.F32, data: randn(r, h, 0.1)}
	}
	qkvW, qkvB := randn(r, 3*h*h, 0.3), randn(r, 3*h, 0.1)
	fused := map[string]testWeight{
		l + "self_attn.in_proj.weight": {shape: []int64{3 * h, h}, typ: formats.F32, data: qkvW},
		l + "self_attn.in_proj.bias":   {shape: []int64{3 * h}, typ: formats.F32, data: qkvB},
	}
	split := map[string]testWeight{}
	for i, n := range []string{"q_proj", "k_proj", "v_proj"} {
		split[l+"self_attn."+n+".weight"] = testWeight{shape: []int64{h, h}, typ: formats.F32, data: qkvW[i*h*h : (i+1)*h*h]}
		split[l+"self_attn."+n+".bias"] = testWeight{shape: []int64{h}, typ: formats.F32, data: qkvB[i*h : (i+1)*h]}
	}
	for k, v := range common {
		fused[k], split[k] = v, v
	}
	ids := []int32{0, 5, 7, 19, 3, 19}
	run := func(w map[string]testWeight, cfg *CLIPConfig) []float32 {
		ws := makeWeights(t, be, w)
		ctx, _ := native.NewContext(4096, 4096)
		defer ctx.Free()
		it, _ := ctx.NewTensor(formats.I32, int64(len(ids)))
		it.SetInput()
		g := &builder{c: ctx, w: ws}
		var out native.Tensor
		var err error
		func() {
			defer native.Recover(&err)
			h, _ := g.clip(cfg, it, -1)
			out = ctx.Cont(h).SetOutput()
		}()
		if err != nil {
			t.Fatal(err)
		}
		gr := ctx.NewGraph(4096)
		gr.Expand(out)
		a := be.NewAllocator()
		defer a.Free()
		if err := a.Alloc(gr); err != nil {
			t.Fatal(err)
		}
		it.SetI32(ids)
		if err := be.Compute(gr); err != nil {
			t.Fatal(err)
		}
		v, err := out.F32()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cfg := CLIPConfig{Prefix: clipPrefix, Hidden: h, FF: ff, Layers: 1, Vocab: vocab, Positions: pos, Heads: 2, Skip: 1, FinalNorm: true}
	a := run(split, &cfg)
	cfg.FusedQKV = true
	b := run(fused, &cfg)
	if e := maxRelErr(t, b, a); e > 1e-6 {
		t.Errorf("fused and split q/k/v differ by %g", e)
	}
}

// The VAE encoder's Downsample pads one zero column and row at the end,
// then convolves with stride 2 and no padding.
func TestVAEDownsamplePadEnd(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(17, 18))
	const ic, oc, h, w = 3, 4, 8, 6
	kw := testWeight{shape: []int64{oc, ic, 3, 3}, typ: formats.F32, data: randn(r, oc*ic*9, 0.3)}
	bw := testWeight{shape: []int64{oc}, typ: formats.F32, data: randn(r, oc, 0.1)}
	ws := makeWeights(t, be, map[string]testWeight{"d.weight": kw, "d.bias": bw})
	x := randn(r, ic*h*w, 1)
	got, ne := runGraph(t, be, ws, []testInput{{[]int64{w, h, ic, 1}, x}},
		func(g *builder, in []native.Tensor) native.Tensor {
			return g.convPad(g.c.PadEnd(in[0], 1, 1), "d", 2, 0)
		})
	// Reference: the same input padded at the end, convolved without padding.
	px := make([]float32, ic*(h+1)*(w+1))
	for c := 0; c < ic; c++ {
		for y := 0; y < h; y++ {
			copy(px[(c*(h+1)+y)*(w+1):], x[(c*h+y)*w:(c*h+y+1)*w])
		}
	}
	want, oh, ow := refConv2D(px, 1, ic, h+1, w+1, kw.data, oc, 3, 3, bw.data, 2, 0)
	if ne != [4]int64{int64(ow), int64(oh), oc, 1} || oh != h/2 || ow != w/2 {
		t.Fatalf("dims %v, want [%d %d %d 1]", ne, ow, oh, oc)
	}
	if e := maxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

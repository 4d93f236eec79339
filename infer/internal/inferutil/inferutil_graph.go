//go:build cgo

package inferutil

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/quant"
)

type TestWeight struct {
	Shape []int64 // PyTorch order
	Typ   formats.DType
	Data  []float32
}

func NewTestBackend(t *testing.T) *native.Backend {
	t.Helper()
	be, err := native.NewCPUBackend(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Free)
	return be
}

// MakeWeights encodes the weights into their types and loads them.
func MakeWeights(t *testing.T, be *native.Backend, w map[string]TestWeight) *infer.WeightSet {
	t.Helper()
	ctx, err := native.NewContext(len(w)+1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ws := &infer.WeightSet{Ctx: ctx, ByName: map[string]native.Tensor{}, Types: map[string]formats.DType{}}
	for name, tw := range w {
		typ := tw.Typ
		if typ == 0 && tw.Typ != formats.F32 {
			typ = formats.F32
		}
		tt, err := ctx.NewTensor(typ, infer.GgmlDims(tw.Shape)...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ws.ByName[name] = tt
	}
	if len(w) == 0 {
		t.Cleanup(ws.Free)
		return ws // ggml allocates no buffer for an empty context
	}
	if ws.Buf, err = be.AllocContext(ctx); err != nil {
		t.Fatal(err)
	}
	for name, tw := range w {
		tt := ws.ByName[name]
		enc, err := quant.Encoder(tt.Type())
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, tt.Bytes())
		rl := int(tw.Shape[len(tw.Shape)-1])
		rb := len(buf) / (len(tw.Data) / rl)
		for r := 0; r < len(tw.Data)/rl; r++ {
			enc.Quantize(buf[r*rb:(r+1)*rb], tw.Data[r*rl:(r+1)*rl], nil)
		}
		if err := tt.SetData(buf); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(ws.Free)
	return ws
}

// Stored returns the values a weight holds after encoding (the reference
// computes with them, so that only the kernel's own error is measured).
func Stored(t *testing.T, tw TestWeight) []float32 {
	t.Helper()
	if tw.Typ == formats.F32 {
		return tw.Data
	}
	enc, _ := quant.Encoder(tw.Typ)
	dec, _ := quant.Decoder(tw.Typ)
	rl := int(tw.Shape[len(tw.Shape)-1])
	rb, _ := tw.Typ.RowBytes(int64(rl))
	out := make([]float32, len(tw.Data))
	buf := make([]byte, rb)
	for r := 0; r < len(tw.Data)/rl; r++ {
		enc.Quantize(buf, tw.Data[r*rl:(r+1)*rl], nil)
		dec.Dequantize(out[r*rl:(r+1)*rl], buf)
	}
	return out
}

type TestInput struct {
	Ne   []int64 // ggml dims
	Data []float32
}

// RunGraph builds out from inputs and weights, computes it and returns its values.
func RunGraph(t *testing.T, be *native.Backend, ws *infer.WeightSet, inputs []TestInput, build func(g *infer.Builder, in []native.Tensor) native.Tensor) ([]float32, [4]int64) {
	t.Helper()
	ctx, err := native.NewContext(8192, 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free()
	var in []native.Tensor
	for _, x := range inputs {
		tt, err := ctx.NewTensor(formats.F32, x.Ne...)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, tt.SetInput())
	}
	g := &infer.Builder{Ctx: ctx, Weights: ws}
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
		if err := in[i].SetF32(x.Data); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range g.Consts {
		if err := c.T.SetF32(c.F32); err != nil {
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

func Randn(r *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	return v
}

// MaxRelErr is max|got-want| / max|want|.
func MaxRelErr(t *testing.T, got, want []float32) float64 {
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

func RefConv2D(x []float32, n, ic, h, w int, k []float32, oc, kh, kw int, bias []float32, stride, pad int) ([]float32, int, int) {
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

func RefAttention(q, k, v []float32, ch, lq, lk, heads, n int, causal bool) []float32 {
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

func GELUTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

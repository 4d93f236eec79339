//go:build cgo

package kl

import (
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/native"
)

// The VAE encoder's Downsample pads one zero column and row at the end,
// then convolves with stride 2 and no padding.
func TestVAEDownsamplePadEnd(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(17, 18))
	const ic, oc, h, w = 3, 4, 8, 6
	kw := inferutil.TestWeight{Shape: []int64{oc, ic, 3, 3}, Typ: formats.F32, Data: inferutil.Randn(r, oc*ic*9, 0.3)}
	bw := inferutil.TestWeight{Shape: []int64{oc}, Typ: formats.F32, Data: inferutil.Randn(r, oc, 0.1)}
	ws := inferutil.MakeWeights(t, be, map[string]inferutil.TestWeight{"d.weight": kw, "d.bias": bw})
	x := inferutil.Randn(r, ic*h*w, 1)
	got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{w, h, ic, 1}, Data: x}},
		func(g *infer.Builder, in []native.Tensor) native.Tensor {
			return g.ConvPad(g.Ctx.PadEnd(in[0], 1, 1), "d", 2, 0)
		})
	// Reference: the same input padded at the end, convolved without padding.
	px := make([]float32, ic*(h+1)*(w+1))
	for c := 0; c < ic; c++ {
		for y := 0; y < h; y++ {
			copy(px[(c*(h+1)+y)*(w+1):], x[(c*h+y)*w:(c*h+y+1)*w])
		}
	}
	want, oh, ow := inferutil.RefConv2D(px, 1, ic, h+1, w+1, kw.Data, oc, 3, 3, bw.Data, 2, 0)
	if ne != [4]int64{int64(ow), int64(oh), oc, 1} || oh != h/2 || ow != w/2 {
		t.Fatalf("dims %v, want [%d %d %d 1]", ne, ow, oh, oc)
	}
	if e := inferutil.MaxRelErr(t, got, want); e > 1e-5 {
		t.Errorf("relative error %g", e)
	}
}

//go:build cgo

package infer

import (
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// The Wan VAE's chunked ggml graphs against the whole-video plain-Go
// reference (wanvae_ref_test.go), at small widths.

// wanTestModel loads test weights into a Model that has only a Wan VAE.
func wanTestModel(t *testing.T, cfg *WanVAEConfig, w map[string]testWeight) *Model {
	t.Helper()
	be := newTestBackend(t)
	ws := makeWeights(t, be, w)
	alloc := be.NewAllocator()
	t.Cleanup(alloc.Free)
	vc := VAEConfig{Kind: "wan", ZChannels: cfg.ZDim, ScaleFactor: 1, Layout: cfg, HasEncoder: cfg.EncDim > 0}
	return &Model{Path: "wan vae test", Config: &ModelConfig{VAE: vc}, be: be, w: ws, alloc: alloc}
}

// psnrRange is the PSNR of got against want over want's range.
func closeEnough(t *testing.T, what string, got []float32, want refVid, tol float64) {
	t.Helper()
	w := make([]float32, len(want.d))
	for i, v := range want.d {
		w[i] = float32(v)
	}
	if e := maxRelErr(t, got, w); e > tol {
		t.Errorf("%s: max relative error %.3g, want <= %g", what, e, tol)
	}
}

func TestWanVAEDecodeFrames(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        WanVAEConfig
		dec        int
		t, h, w    int
		wantFrames int
	}{
		{"2.1", WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1, DecDim: 4}, 4, 3, 2, 3, 9},
		{"2.2", WanVAEConfig{V22: true, ZDim: 48, Pixels: 3, Patch: 2, DecDim: 4}, 4, 3, 2, 2, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(41, 42))
			w := wanTestWeights(r, &tc.cfg, tc.dec, 0)
			m := wanTestModel(t, &tc.cfg, w)
			z := randn(r, tc.t*tc.cfg.ZDim*tc.h*tc.w, 1)
			got, frames, err := m.DecodeVideo(z, tc.t, tc.w, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			if frames != tc.wantFrames {
				t.Fatalf("%d frames, want %d", frames, tc.wantFrames)
			}
			ws, sh := refOf(t, w)
			want := refWanDecode(ws, sh, &tc.cfg, refVidOf(z, tc.t, tc.cfg.ZDim, tc.h, tc.w))
			if want.t != frames || want.c != 3 || want.h != tc.h*8*tc.cfg.Patch {
				t.Fatalf("reference %dx%dx%dx%d", want.t, want.c, want.h, want.w)
			}
			closeEnough(t, "decoded video", got, want, 1e-2)
			// One frame through the single-graph path (Qwen-Image's).
			one, err := m.DecodeLatent(z[:tc.cfg.ZDim*tc.h*tc.w], tc.w, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			closeEnough(t, "first frame alone", one, refFrames(want, 0, 1), 1e-2)
		})
	}
}

func TestWanVAEEncodeFrame(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  WanVAEConfig
		h, w int
	}{
		{"2.1", WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1, DecDim: 4, EncDim: 4}, 16, 24},
		{"2.2", WanVAEConfig{V22: true, ZDim: 48, Pixels: 3, Patch: 2, DecDim: 4, EncDim: 4}, 32, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(43, 44))
			w := wanTestWeights(r, &tc.cfg, 4, tc.cfg.EncDim)
			m := wanTestModel(t, &tc.cfg, w)
			px := randn(r, 3*tc.h*tc.w, 0.5)
			got, err := m.EncodeImage(px, tc.w, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			ws, sh := refOf(t, w)
			want := refWanEncode(ws, sh, &tc.cfg, refVidOf(px, 1, 3, tc.h, tc.w))
			s := 8 * tc.cfg.Patch
			if want.c != tc.cfg.ZDim || want.h != tc.h/s || want.w != tc.w/s {
				t.Fatalf("reference %dx%dx%d", want.c, want.h, want.w)
			}
			closeEnough(t, "latent", got, want, 1e-2)
		})
	}
}

// runWanChunks runs build on successive chunks of x [W, H, C, T] (frame
// counts in sizes), carrying the caches, and returns the outputs joined.
func runWanChunks(t *testing.T, m *Model, x []float32, ne [4]int64, sizes []int, build func(r *wanRun, x native.Tensor) native.Tensor) []float32 {
	t.Helper()
	frame := int(ne[0] * ne[1] * ne[2])
	var caches []wanCache
	var out []float32
	at := 0
	for i, n := range sizes {
		var next []native.Tensor
		err := m.compute(func(g *builder) ([]input, native.Tensor) {
			r := &wanRun{g: g, cfg: &WanVAEConfig{}, chunk: i, prev: caches}
			xt := newInput(g, formats.F32, ne[0], ne[1], ne[2], int64(n))
			y := build(r, xt)
			for _, c := range r.next {
				if c.Valid() {
					g.output(c)
				}
			}
			next = r.next
			return []input{{t: xt, f32: x[at*frame : (at+n)*frame]}}, y
		}, func(o native.Tensor) error {
			v, err := o.F32()
			out = append(out, v...)
			if err == nil {
				caches, err = readCaches(next)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		at += n
	}
	return out
}

// TestWanCausalConvChunks checks a causal 3x3x3 conv run in chunks of 1,
// 2, 4 and 1 frames with its cache against one conv over the whole video
// with zero frames in front, and a residual block (two of them, RMS norms,
// a shortcut) and the middle attention likewise.
func TestWanCausalConvChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	cfg := &WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1}
	w := map[string]testWeight{}
	const ci, co, h, wd = 6, 8, 5, 7
	add := func(name string, typ formats.DType, std, mean float64, shape ...int64) {
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		v := randn(r, n, std)
		for i := range v {
			v[i] += float32(mean)
		}
		w[name] = testWeight{shape: shape, typ: typ, data: v}
	}
	add("c.weight", formats.F16, 0.2, 0, co, ci, 3, 3, 3)
	add("c.bias", formats.F32, 0.1, 0, co)
	add("b.residual.0.gamma", formats.F32, 0.1, 1, ci, 1, 1, 1)
	add("b.residual.2.weight", formats.F16, 0.1, 0, co, ci, 3, 3, 3)
	add("b.residual.2.bias", formats.F32, 0.1, 0, co)
	add("b.residual.3.gamma", formats.F32, 0.1, 1, co, 1, 1, 1)
	add("b.residual.6.weight", formats.F16, 0.1, 0, co, co, 3, 3, 3)
	add("b.residual.6.bias", formats.F32, 0.1, 0, co)
	add("b.shortcut.weight", formats.F16, 0.3, 0, co, ci, 1, 1, 1)
	add("b.shortcut.bias", formats.F32, 0.1, 0, co)
	add("a.norm.gamma", formats.F32, 0.1, 1, ci, 1, 1)
	add("a.to_qkv.weight", formats.F16, 0.3, 0, 3*ci, ci, 1, 1)
	add("a.to_qkv.bias", formats.F32, 0.1, 0, 3*ci)
	add("a.proj.weight", formats.F16, 0.3, 0, ci, ci, 1, 1)
	add("a.proj.bias", formats.F32, 0.1, 0, ci)
	m := wanTestModel(t, cfg, w)
	ws, sh := refOf(t, w)
	sizes := []int{1, 2, 4, 1}
	const frames = 8
	x := randn(r, frames*ci*h*wd, 1)
	ne := [4]int64{wd, h, ci, frames}
	xv := refVidOf(x, frames, ci, h, wd)

	got := runWanChunks(t, m, x, ne, sizes, func(r *wanRun, x native.Tensor) native.Tensor { return r.causalConv(x, "c") })
	closeEnough(t, "causal conv", got, refConv3d(ws, sh, xv, "c", 2, 1, 1, 1), 5e-3)

	got = runWanChunks(t, m, x, ne, sizes, func(r *wanRun, x native.Tensor) native.Tensor { return r.resBlock(x, "b.") })
	closeEnough(t, "residual block", got, refResBlock(ws, sh, xv, "b."), 5e-3)

	got = runWanChunks(t, m, x, ne, []int{frames}, func(r *wanRun, x native.Tensor) native.Tensor { return r.attn(x, "a.") })
	closeEnough(t, "attention", got, refAttn(ws, sh, xv, "a."), 5e-3)
}

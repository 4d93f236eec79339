//go:build cgo

package wan_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	wanvae "github.com/sdtool/sdtool/infer/vae/wan"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/native"
)

// The Wan VAE's chunked ggml graphs against the whole-video plain-Go
// reference (wanvae_ref_test.go), at small widths.

// wanVAETestModel loads test weights into a Model that has only a Wan VAE.
func wanVAETestModel(t *testing.T, cfg *wanvae.WanVAEConfig, w map[string]inferutil.TestWeight) *infer.Model {
	t.Helper()
	// One thread: these graphs are thousands of tiny nodes, where a second
	// thread only adds a barrier per node.
	be, err := native.NewCPUBackend(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Free)
	ws := inferutil.MakeWeights(t, be, w)
	alloc := be.NewAllocator()
	t.Cleanup(alloc.Free)
	vc := infer.VAEConfig{Kind: "wan", ZChannels: cfg.ZDim, ScaleFactor: 1, Layout: cfg, HasEncoder: cfg.EncDim > 0}
	return &infer.Model{Path: "wan vae test", Config: &infer.ModelConfig{VAE: vc}, Backend: be, Weights: ws, Alloc: alloc}
}

// closeEnough fails t when got is further from the reference want than tol
// (maximum error relative to want's largest magnitude).
func closeEnough(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if e := inferutil.MaxRelErr(t, got, float32s(want)); e > tol {
		t.Errorf("%s: max relative error %.3g, want <= %g", what, e, tol)
	}
}

func TestWanVAEDecodeFrames(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        wanvae.WanVAEConfig
		dec        int
		t, h, w    int
		wantFrames int
	}{
		{"2.1", wanvae.WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1, DecDim: 4}, 4, 3, 2, 3, 9},
		{"2.2", wanvae.WanVAEConfig{V22: true, ZDim: 48, Pixels: 3, Patch: 2, DecDim: 4}, 4, 3, 2, 2, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(41, 42))
			w := inferutil.WanVAETestWeights(r, &tc.cfg, tc.dec, 0)
			m := wanVAETestModel(t, &tc.cfg, w)
			z := inferutil.Randn(r, tc.t*tc.cfg.ZDim*tc.h*tc.w, 1) // [T, Z, h, w]
			got, frames, err := m.DecodeVideo(channelsFirst(z, tc.t, tc.cfg.ZDim*tc.h*tc.w, tc.h*tc.w), tc.w, tc.h, tc.t)
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
			closeEnough(t, "decoded video", got, want.d, 1e-2)
			// One frame through the single-graph path (Qwen-Image's).
			one, err := m.DecodeLatent(z[:tc.cfg.ZDim*tc.h*tc.w], tc.w, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			closeEnough(t, "first frame alone", one, refFrames(want, 0, 1).d, 1e-2)
		})
	}
}

func TestWanVAEEncodeFrames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     wanvae.WanVAEConfig
		n, h, w int
	}{
		{"2.1", wanvae.WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1, DecDim: 4, EncDim: 4}, 9, 16, 24},
		{"2.2", wanvae.WanVAEConfig{V22: true, ZDim: 48, Pixels: 3, Patch: 2, DecDim: 4, EncDim: 4}, 9, 32, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(43, 44))
			w := inferutil.WanVAETestWeights(r, &tc.cfg, 4, tc.cfg.EncDim)
			m := wanVAETestModel(t, &tc.cfg, w)
			px := inferutil.Randn(r, tc.n*3*tc.h*tc.w, 0.5)
			got, frames, err := m.EncodeVideo(px, tc.w, tc.h, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			ws, sh := refOf(t, w)
			want := refWanEncode(ws, sh, &tc.cfg, refVidOf(px, tc.n, 3, tc.h, tc.w))
			s := 8 * tc.cfg.Patch
			if want.t != frames || want.c != tc.cfg.ZDim || want.h != tc.h/s || want.w != tc.w/s {
				t.Fatalf("%d latent frames; reference %dx%dx%dx%d", frames, want.t, want.c, want.h, want.w)
			}
			cell := want.h * want.w
			if e := inferutil.MaxRelErr(t, got, channelsFirst(float32s(want.d), want.t, want.c*cell, cell)); e > 1e-2 {
				t.Errorf("latent video: max relative error %.3g, want <= 0.01", e)
			}
			// The first frame alone through the single-graph path (img2img).
			one, err := m.EncodeImage(px[:3*tc.h*tc.w], tc.w, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			closeEnough(t, "first frame alone", one, refFrames(want, 0, 1).d, 1e-2)
		})
	}
}

func float32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// channelsFirst reorders frames [T][C][cell] to [C][T][cell].
func channelsFirst(x []float32, t, frame, cell int) []float32 {
	out := make([]float32, len(x))
	c := frame / cell
	for f := range t {
		for ch := range c {
			copy(out[(ch*t+f)*cell:(ch*t+f+1)*cell], x[f*frame+ch*cell:])
		}
	}
	return out
}

// runWanChunks runs build on successive chunks of x [W, H, C, T] (frame
// counts in sizes), carrying the caches, and returns the outputs joined.
func runWanChunks(t *testing.T, m *infer.Model, x []float32, ne [4]int64, sizes []int, build func(r *wanvae.WanRun, x native.Tensor) native.Tensor) []float32 {
	t.Helper()
	frame := int(ne[0] * ne[1] * ne[2])
	caches := &wanvae.WanCacheSet{Backend: m.Backend}
	defer caches.Free()
	var out []float32
	at := 0
	for i, n := range sizes {
		err := m.Compute(func(g *infer.Builder) ([]infer.Input, native.Tensor) {
			r := &wanvae.WanRun{G: g, Cfg: &wanvae.WanVAEConfig{}, Chunk: i, Cache: caches, Keep: true}
			xt := infer.NewInput(g, formats.F32, ne[0], ne[1], ne[2], int64(n))
			return []infer.Input{{T: xt, F32: x[at*frame : (at+n)*frame]}}, build(r, xt)
		}, func(o native.Tensor) error {
			v, err := o.F32()
			out = append(out, v...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		caches.Commit()
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
	cfg := &wanvae.WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1}
	w := map[string]inferutil.TestWeight{}
	const ci, co, h, wd = 6, 8, 5, 7
	add := func(name string, typ formats.DType, std, mean float64, shape ...int64) {
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		v := inferutil.Randn(r, n, std)
		for i := range v {
			v[i] += float32(mean)
		}
		w[name] = inferutil.TestWeight{Shape: shape, Typ: typ, Data: v}
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
	m := wanVAETestModel(t, cfg, w)
	ws, sh := refOf(t, w)
	sizes := []int{1, 2, 4, 1}
	const frames = 8
	x := inferutil.Randn(r, frames*ci*h*wd, 1)
	ne := [4]int64{wd, h, ci, frames}
	xv := refVidOf(x, frames, ci, h, wd)

	got := runWanChunks(t, m, x, ne, sizes, func(r *wanvae.WanRun, x native.Tensor) native.Tensor { return r.CausalConv(x, "c") })
	closeEnough(t, "causal conv", got, refConv3d(ws, sh, xv, "c", 2, 1, 1, 1).d, 5e-3)

	got = runWanChunks(t, m, x, ne, sizes, func(r *wanvae.WanRun, x native.Tensor) native.Tensor { return r.ResBlock(x, "b.") })
	closeEnough(t, "residual block", got, refResBlock(ws, sh, xv, "b.").d, 5e-3)

	got = runWanChunks(t, m, x, ne, []int{frames}, func(r *wanvae.WanRun, x native.Tensor) native.Tensor { return r.Attn(x, "a.") })
	closeEnough(t, "attention", got, refAttn(ws, sh, xv, "a.").d, 5e-3)
}

// TestWanVAEDecodeMemoryBounded builds (without computing) the decoder's
// chunks for a 480x832 clip (and a 32x32 one, the size the sd-cli parity
// test renders) at Wan 2.1's full widths and checks that memory stops
// growing after the first chunks (from chunk 3 on, every cache holds two
// frames): each later chunk's graph needs the same compute buffer and the
// same caches, so a clip of any length decodes in the memory of a few
// frames. It logs the figures.
func TestWanVAEDecodeMemoryBounded(t *testing.T) {
	longtest.Skip(t, "a full-width Wan VAE at 480x832 (graphs only)")
	cfg := &wanvae.WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1, DecDim: 96}
	be := inferutil.NewTestBackend(t)
	shapes := inferutil.WanVAETestWeights(rand.New(rand.NewPCG(1, 2)), cfg, 96, 0)
	ctx, err := native.NewContext(len(shapes)+1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ws := &infer.WeightSet{Ctx: ctx, ByName: map[string]native.Tensor{}, Types: map[string]formats.DType{}}
	for name, tw := range shapes {
		if ws.ByName[name], err = ctx.NewTensor(tw.Typ, infer.GgmlDims(tw.Shape)...); err != nil {
			t.Fatal(err)
		}
	}
	if ws.Buf, err = be.AllocContext(ctx); err != nil { // left unfilled: only shapes matter
		t.Fatal(err)
	}
	defer ws.Free()
	for _, size := range [][2]int64{{104, 60}, {4, 4}} {
		sizes := wanChunkMemory(t, be, ws, cfg, size[0], size[1], 5)
		if n := len(sizes); sizes[n-1] != sizes[n-3] || sizes[n-2] != sizes[n-4] {
			t.Errorf("%dx%d: chunk 4 needs %d + %d bytes, chunk 3 %d + %d: memory grows with the clip",
				8*size[0], 8*size[1], sizes[n-2], sizes[n-1], sizes[n-4], sizes[n-3])
		}
	}
}

// wanChunkMemory builds and allocates the decoder's graphs for chunks
// latent frames of w×h as decodeWanVideo runs them (each chunk's head, then
// its tail for one frame) and returns, per chunk, the larger compute
// buffer and the cache bytes.
func wanChunkMemory(t *testing.T, be *native.Backend, ws *infer.WeightSet, cfg *wanvae.WanVAEConfig, w, h int64, chunks int) []int64 {
	caches := &wanvae.WanCacheSet{Backend: be}
	defer caches.Free()
	var sizes []int64
	for chunk := range chunks {
		var mid [4]int64
		tailIdx := 0
		head := wanGraphSize(t, be, ws, func(g *infer.Builder) native.Tensor {
			r := &wanvae.WanRun{G: g, Cfg: cfg, Chunk: chunk, Cache: caches, Keep: true}
			x := r.DecodeHead(infer.NewInput(g, formats.F32, w, h, int64(cfg.ZDim), 1))
			mid, tailIdx = x.Ne(), r.Idx
			return x
		})
		caches.Commit()
		tail := wanGraphSize(t, be, ws, func(g *infer.Builder) native.Tensor {
			r := &wanvae.WanRun{G: g, Cfg: cfg, Chunk: chunk, Idx: tailIdx, Cache: caches, Keep: true}
			return r.DecodeTail(infer.NewInput(g, formats.F32, mid[0], mid[1], mid[2], 1))
		})
		caches.Commit()
		var cache int64
		for _, sl := range caches.Slots {
			if sl != nil {
				cache += sl.Buf.Size()
			}
		}
		t.Logf("%dx%d chunk %d: %d frames, compute buffer %.1f MiB (head) and %.1f MiB (tail, per frame), caches %.1f MiB",
			8*w, 8*h, chunk, mid[3], float64(head)/(1<<20), float64(tail)/(1<<20), float64(cache)/(1<<20))
		sizes = append(sizes, max(head, tail), cache)
	}
	return sizes
}

// wanGraphSize builds a graph and returns the compute buffer it needs.
func wanGraphSize(t *testing.T, be *native.Backend, ws *infer.WeightSet, build func(g *infer.Builder) native.Tensor) int64 {
	gctx, err := native.NewContext(4*infer.GraphSize, infer.GraphSize)
	if err != nil {
		t.Fatal(err)
	}
	defer gctx.Free()
	g := &infer.Builder{Ctx: gctx, Weights: ws}
	var out native.Tensor
	func() {
		defer native.Recover(&err)
		out = build(g).SetOutput()
	}()
	if err != nil {
		t.Fatal(err)
	}
	gr := gctx.NewGraph(infer.GraphSize)
	for _, n := range g.Expand {
		gr.Expand(n)
	}
	gr.Expand(out)
	alloc := be.NewAllocator()
	defer alloc.Free()
	if err := alloc.Alloc(gr); err != nil {
		t.Fatal(err)
	}
	return alloc.Size()
}

// TestDetectWanVAE reads both versions' layouts from their shapes, with
// Conv3d kernels 5-D (safetensors) or folded to 4-D (sd.cpp's GGUF), and
// refuses the 2-D variant.
func TestDetectWanVAE(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  wanvae.WanVAEConfig
		fold bool
	}{
		{"2.1", wanvae.WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1, DecDim: 8, EncDim: 4}, false},
		{"2.1 folded", wanvae.WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1, DecDim: 8, EncDim: 4}, true},
		{"2.2", wanvae.WanVAEConfig{V22: true, ZDim: 48, Pixels: 3, Patch: 2, DecDim: 8, EncDim: 4}, false},
		{"2.2 decoder only", wanvae.WanVAEConfig{V22: true, ZDim: 48, Pixels: 3, Patch: 2, DecDim: 8}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := map[string][]int64{}
			for name, w := range inferutil.WanVAETestWeights(rand.New(rand.NewPCG(1, 1)), &tc.cfg, tc.cfg.DecDim, tc.cfg.EncDim) {
				sh[name] = w.Shape
				if tc.fold {
					sh[name] = infer.FoldDims(w.Shape)
				}
			}
			var c infer.VAEConfig
			if err := wanvae.DetectWanVAE(infer.Shapes(sh), &c); err != nil {
				t.Fatal(err)
			}
			if got := *c.Layout.(*wanvae.WanVAEConfig); got != tc.cfg {
				t.Errorf("detected %+v, want %+v", got, tc.cfg)
			}
			if c.ZChannels != tc.cfg.ZDim || c.HasEncoder != (tc.cfg.EncDim > 0) {
				t.Errorf("ZChannels %d, HasEncoder %v", c.ZChannels, c.HasEncoder)
			}
			if s, tm := tc.cfg.Factors(); s != 8*tc.cfg.Patch || tm != 4 {
				t.Errorf("factors %d, %d", s, tm)
			}
		})
	}
	sh := map[string][]int64{}
	cfg := wanvae.WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1}
	for name, w := range inferutil.WanVAETestWeights(rand.New(rand.NewPCG(1, 1)), &cfg, 4, 0) {
		sh[name] = w.Shape
	}
	sh[infer.VAEPfx+"decoder.conv1.weight"] = []int64{16, 16, 3, 3}
	var c infer.VAEConfig
	if err := wanvae.DetectWanVAE(infer.Shapes(sh), &c); err == nil || !strings.Contains(err.Error(), "2-D") {
		t.Errorf("a 2-D Wan VAE: %v, want an error saying so", err)
	}
}

// TestWanVAEFactorsMatchFamily: a Wan 2.2 VAE (16 pixels per cell) is
// refused by an entry whose latent format has 8, and taken by one with 16;
// an image entry (no TimeFactor) takes a 2.1 VAE.
func TestWanVAEFactorsMatchFamily(t *testing.T) {
	vk, _ := infer.LookupVAEKind("wan")
	v21 := &infer.VAEConfig{Kind: "wan", Layout: &wanvae.WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1}}
	v22 := &infer.VAEConfig{Kind: "wan", Layout: &wanvae.WanVAEConfig{V22: true, ZDim: 48, Pixels: 3, Patch: 2}}
	for _, tc := range []struct {
		vae    infer.VAEFacts
		c      *infer.VAEConfig
		refuse bool
	}{
		{infer.VAEFacts{Kind: "wan", Scale: 1, TimeFactor: 4}, v22, true},
		{infer.VAEFacts{Kind: "wan", Scale: 1, TimeFactor: 4, Down: 16}, v22, false},
		{infer.VAEFacts{Kind: "wan", Scale: 1, TimeFactor: 4}, v21, false},
		{infer.VAEFacts{Kind: "wan", Scale: 1}, v21, false},
		{infer.VAEFacts{Kind: "wan", Scale: 1, TimeFactor: 2}, v21, true},
	} {
		err := infer.CheckVAEFactors(&infer.Family{Title: "test", VAE: tc.vae}, vk, tc.c)
		if (err != nil) != tc.refuse {
			t.Errorf("%+v with %+v: %v, refuse %v", tc.vae, tc.c.Layout, err, tc.refuse)
		}
	}
}

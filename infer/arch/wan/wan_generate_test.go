//go:build cgo

package wan

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	wanvae "github.com/sdtool/sdtool/infer/vae/wan"
	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/native"
)

// wanGenerateModel is a Model of the tiny Wan DiT with a tiny Wan VAE
// (2.1's decoder with 16 latent channels, or 2.2's decoder and encoder
// with 48 for TI2V-5B) and no text encoder (sd-cli's zero context), as
// Load would make it: the family is detected from the weights' shapes.
func wanGenerateModel(t *testing.T, v22 bool) *infer.Model { return wanExpertModel(t, v22, expertNone) }

// The high-noise experts wanExpertModel gives a model.
const (
	expertNone  = iota
	expertSame  // the model's own weights again
	expertOther // weights of their own
)

// wanExpertModel is wanGenerateModel, with a Wan 2.2 A14B-style high-noise expert as asked.
func wanExpertModel(t *testing.T, v22 bool, expert int) *infer.Model {
	t.Helper()
	r := rand.New(rand.NewPCG(11, 12))
	cfg := wanTestCfg
	vcfg := &wanvae.WanVAEConfig{ZDim: 16, DecDim: 4, Pixels: 3, Patch: 1}
	if v22 {
		vcfg.ZDim, vcfg.Patch, vcfg.V22, vcfg.EncDim = 48, 2, true, 4
	}
	cfg.InChannels, cfg.OutChannels, cfg.Blocks = vcfg.ZDim, vcfg.ZDim, 1
	w := wanTestWeights(r, cfg)
	if expert != expertNone {
		h := cfg
		h.Prefix = wanHighNoisePrefix
		cfg.HighNoise = &h
		hr := rand.New(rand.NewPCG(11, 12)) // the same draws as the model's
		if expert == expertOther {
			hr = rand.New(rand.NewPCG(13, 14))
		}
		for n, tw := range wanTestWeights(hr, h) {
			w[n] = tw
		}
	}
	for n, tw := range inferutil.WanVAETestWeights(r, vcfg, vcfg.DecDim, vcfg.EncDim) {
		w[n] = tw
	}
	sh := map[string][]int64{}
	for n, tw := range w {
		sh[n] = tw.Shape
	}
	fam, err := infer.DetectFamily(sh)
	if err != nil {
		t.Fatal(err)
	}
	be, err := native.NewCPUBackend(1) // one thread: see model_test.go
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Free)
	ws := inferutil.MakeWeights(t, be, w)
	alloc := be.NewAllocator()
	t.Cleanup(alloc.Free)
	m := &infer.Model{Path: "wan generate test", Family: fam, Backend: be, Weights: ws, Alloc: alloc, Net: &wanNet{cfg: &cfg},
		Config: &infer.ModelConfig{Family: fam.Name(), Network: &cfg, Prediction: infer.FlowPrediction, PredictionKnown: true,
			VAE: infer.VAEConfig{Kind: "wan", ZChannels: vcfg.ZDim, ScaleFactor: 1, Layout: vcfg, HasEncoder: vcfg.EncDim > 0}}}
	c, err := newWanConditioner(m)
	if err != nil {
		t.Fatal(err)
	}
	m.Cond = c
	return m
}

func TestWanGeneratesFrames(t *testing.T) {
	m := wanGenerateModel(t, false)
	if m.Family.Name() != "wan" {
		t.Errorf("detected %s, want wan", m.Family.Name())
	}
	req := infer.Request{Width: 16, Height: 16, Frames: 5, Steps: 2, CFGScale: 3, Seed: 5}
	res, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	// 5 frames: 2 latent frames of 2x2 cells, decoded to 1 + 4 frames.
	const frame = 3 * 16 * 16
	if res.Frames != 5 || len(res.Pixels) != 5*frame || len(res.Latent) != 16*2*2*2 || res.NaNPixels != 0 {
		t.Fatalf("%d frames, %d pixel values, %d latent values, %d NaN", res.Frames, len(res.Pixels), len(res.Latent), res.NaNPixels)
	}
	px, n, err := m.DecodeVideo(res.Latent, 2, 2, 2)
	if err != nil || n != 5 || !slices.Equal(px, res.Pixels) {
		t.Errorf("decoding the final latent again: %d frames, %v; differs: %v", n, err, !slices.Equal(px, res.Pixels))
	}
	if slices.Equal(res.Pixels[:frame], res.Pixels[frame:2*frame]) {
		t.Error("frames 0 and 1 are identical")
	}
}

// TestWanFrameCounts checks sd-cli's frame arithmetic: F frames are
// (F-1)/4+1 latent frames, which decode to (that-1)·4+1 frames.
func TestWanFrameCounts(t *testing.T) {
	v := wanVAE
	for _, c := range []struct{ frames, latent, video int }{{1, 1, 1}, {5, 2, 5}, {6, 2, 5}, {8, 2, 5}, {9, 3, 9}, {33, 9, 33}, {0, 0, 0}} {
		if l, f := v.LatentFrames(c.frames), v.VideoFrames(c.frames); l != c.latent || f != c.video {
			t.Errorf("%d frames: %d latent frames, %d frames; want %d and %d", c.frames, l, f, c.latent, c.video)
		}
	}
	if (&infer.VAEFacts{}).LatentFrames(9) != 0 {
		t.Error("an image VAE has latent frames")
	}
}

// TestWanTI2VGenerates runs TI2V-5B's layout: 48 channels, Wan 2.2's VAE
// at 16 pixels per cell, so 32x32 pixels are 2x2 latent cells.
func TestWanTI2VGenerates(t *testing.T) {
	m := wanGenerateModel(t, true)
	if m.Family.Name() != "wan-ti2v-5b" {
		t.Fatalf("detected %s, want wan-ti2v-5b", m.Family.Name())
	}
	if w, h, mult := m.AlignSize(40, 32); w != 64 || h != 32 || mult != 32 {
		t.Errorf("aligned 40x32 to %dx%d (multiple %d), want 64x32 (32)", w, h, mult)
	}
	res, err := m.Generate(infer.Request{Width: 32, Height: 32, Frames: 5, Steps: 1, CFGScale: 1, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Frames != 5 || len(res.Pixels) != 5*3*32*32 || len(res.Latent) != 48*2*2*2 || res.NaNPixels != 0 {
		t.Fatalf("%d frames, %d pixel values, %d latent values, %d NaN", res.Frames, len(res.Pixels), len(res.Latent), res.NaNPixels)
	}
}

// TestWanExpertStages checks sd-cli's split between the high-noise expert
// and the model: a step count, or the first sigma below the boundary.
func TestWanExpertStages(t *testing.T) {
	m := &infer.Model{Net: &wanNet{cfg: &WanConfig{HighNoise: &WanConfig{}}}}
	sigmas := []float32{1, 0.95, 0.9, 0.8, 0.5, 0}
	for _, c := range []struct {
		hn   infer.HighNoise
		want []int // sigmas per stage
	}{
		{infer.HighNoise{Steps: -1, Boundary: 0.875}, []int{4, 3}},
		{infer.HighNoise{Steps: 2}, []int{3, 4}},
		{infer.HighNoise{Steps: 0}, []int{6}},
		{infer.HighNoise{Steps: 5}, []int{6}},
		{infer.HighNoise{Steps: -1, Boundary: 1.5}, []int{6}},
	} {
		req := &infer.Request{HighNoise: &c.hn, CFGScale: 3}
		st := m.Stages(req, sigmas)
		var got []int
		for _, s := range st {
			got = append(got, len(s.Sigmas))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%+v: stages of %v sigmas, want %v", c.hn, got, c.want)
		}
		if c.hn.Steps == 5 && st[0].Net == m.Net {
			t.Error("five expert steps run the model's own network")
		}
	}
}

// TestWanA14BGenerates runs a model with a high-noise expert: an expert
// with the model's own weights for the first step renders what the model
// alone renders in all the steps, and one with weights of its own does not.
func TestWanA14BGenerates(t *testing.T) {
	longtest.Skip(t, "Wan 2.2's two experts' render")
	req := infer.Request{Width: 16, Height: 16, Frames: 1, Steps: 1, CFGScale: 2, Seed: 9}
	plain := wanExpertModel(t, false, expertNone)
	req.Steps = 2
	want, err := plain.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	req.Steps = 1
	req.HighNoise = &infer.HighNoise{Steps: 1, CFGScale: 2}
	same, err := wanExpertModel(t, false, expertSame).Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(same.Latent, want.Latent) {
		t.Errorf("an expert equal to the model changes the latent (max relative error %g)", inferutil.MaxRelErr(t, same.Latent, want.Latent))
	}
	other, err := wanExpertModel(t, false, expertOther).Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if e := inferutil.MaxRelErr(t, other.Latent, want.Latent); e < 1e-3 {
		t.Errorf("an expert of its own leaves the latent within %g", e)
	}
	if _, err := plain.Generate(req); err == nil {
		t.Error("high-noise settings for a model without an expert: no error")
	}
}

// TestWanTI2VImageToVideo runs TI2V-5B's image-to-video on the tiny
// layout: the init image, VAE-encoded alone, must come out as latent
// frame 0 (held through sampling, as sd-cli's denoise mask holds it) and
// decode to the same first frame it decodes to alone; the frames after it
// are generated, and depend on the image.
func TestWanTI2VImageToVideo(t *testing.T) {
	m := wanGenerateModel(t, true)
	const size, cells = 32, 2 // 16 pixels per cell
	r := rand.New(rand.NewPCG(21, 22))
	init := inferutil.Randn(r, 3*size*size, 0.5)
	req := infer.Request{Width: size, Height: size, Frames: 5, Steps: 1, CFGScale: 1, Seed: 3, Init: init, Strength: 1}
	res, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Frames != 5 || len(res.Latent) != 48*2*cells*cells || res.NaNPixels != 0 {
		t.Fatalf("%d frames, %d latent values, %d NaN", res.Frames, len(res.Latent), res.NaNPixels)
	}
	z0, _, err := m.EncodeVideo(init, size, size, 1)
	if err != nil {
		t.Fatal(err)
	}
	const cell = cells * cells
	var held []float32
	for ch := range 48 {
		held = append(held, res.Latent[ch*2*cell:(ch*2+1)*cell]...)
	}
	// The last Euler step lands on the held latent up to rounding.
	if e := inferutil.MaxRelErr(t, held, z0); e > 1e-5 {
		t.Errorf("latent frame 0 is not the init image's latent: max relative error %g", e)
	}
	alone, n, err := m.DecodeVideo(z0, cells, cells, 1)
	if err != nil || n != 1 {
		t.Fatalf("decoding the init latent: %d frames, %v", n, err)
	}
	const frame = 3 * size * size
	if e := inferutil.MaxRelErr(t, res.Pixels[:frame], alone); e > 1e-4 {
		t.Errorf("frame 0 differs from the init image's round trip by %g", e)
	}
	if slices.Equal(res.Pixels[frame:2*frame], res.Pixels[:frame]) {
		t.Error("frame 1 repeats frame 0")
	}
	req.Init = inferutil.Randn(r, 3*size*size, 0.5)
	other, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(other.Latent[cell:2*cell], res.Latent[cell:2*cell]) {
		t.Error("latent frame 1 does not depend on the init image")
	}
}

// TestWanVideoInitRefused checks the refusals: an init image with Wan 2.1
// (text-to-video only), and with TI2V-5B but no frames to generate.
func TestWanVideoInitRefused(t *testing.T) {
	for _, c := range []struct {
		v22          bool
		size, frames int
		want         string
	}{
		{false, 16, 5, "text only"},
		{true, 32, 0, "ask for frames"},
	} {
		m := wanGenerateModel(t, c.v22)
		req := infer.Request{Width: c.size, Height: c.size, Frames: c.frames, Steps: 1, CFGScale: 1, Init: make([]float32, 3*c.size*c.size), Strength: 1}
		if _, err := m.Generate(req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with an init image and %d frames: %v, want an error saying %q", m.Family.Title, c.frames, err, c.want)
		}
	}
}

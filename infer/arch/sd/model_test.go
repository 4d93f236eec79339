//go:build cgo

package sd

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/clip"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/infer/vae/kl"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
)

// Tests run ggml with one thread: on a loaded two-core machine ggml's
// spinning thread barriers make two threads many times slower, and the
// results do not depend on the thread count anyway.

func TestTinyDeterministic(t *testing.T) {
	longtest.Skip(t, "two renders compared bit for bit")
	m := inferutil.LoadTiny(t, "../../../testdata/tiny-sd1.gguf")
	req := infer.Request{Prompt: "a (cat:1.2) photo", Negative: "blurry", Width: 64, Height: 64, Steps: 2, CFGScale: 7, Seed: 42}
	a, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Pixels, b.Pixels) || !slices.Equal(a.Latent, b.Latent) {
		t.Error("the same seed gave different images")
	}
	if len(a.Pixels) != 3*64*64 || len(a.Latent) != 4*8*8 {
		t.Fatalf("%d pixels and %d latent values", len(a.Pixels), len(a.Latent))
	}
	// One step without guidance keeps the two-thread run short (see above).
	one := infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 1, Seed: 42}
	b1, err := m.Generate(one)
	if err != nil {
		t.Fatal(err)
	}
	m.SetThreads(2)
	c, err := m.Generate(one)
	m.SetThreads(1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b1.Pixels, c.Pixels) {
		t.Error("two threads gave a different image than one")
	}
	req.Seed = 43
	d, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a.Latent, d.Latent) {
		t.Error("another seed gave the same latent")
	}
	req.Seed, req.Negative = 42, ""
	e, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a.Latent, e.Latent) {
		t.Error("the negative prompt changed nothing")
	}
}

func TestTinyCaptureAndImg2Img(t *testing.T) {
	m := inferutil.LoadTiny(t, "../../../testdata/tiny-sd1.gguf")
	req := infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 2, CFGScale: 1, Seed: 1, Method: infer.Euler, CaptureBlocks: true}
	r, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	// 12 input blocks, the middle block and 12 output blocks for SD1's layout.
	if len(r.Blocks) != 25 || r.Blocks[0].Name != "input_blocks.0" || r.Blocks[12].Name != "middle_block" {
		t.Fatalf("%d blocks captured", len(r.Blocks))
	}
	if n := len(r.Blocks[0].Values); n != 32*8*8 {
		t.Errorf("input_blocks.0 has %d values, want %d", n, 32*8*8)
	}
	req.Init, req.Strength, req.CaptureBlocks = r.Pixels, 0.5, false
	i2i, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(i2i.Latent, r.Latent) {
		t.Error("img2img returned the init latent")
	}
}

func TestGenerateRejects(t *testing.T) {
	m := inferutil.LoadTiny(t, "../../../testdata/tiny-sd1.gguf")
	for _, req := range []infer.Request{
		{Prompt: "a", Width: 64, Height: 64, Steps: 0},
		{Prompt: "a", Width: 56, Height: 64, Steps: 1, Init: make([]float32, 3*56*64), Strength: 0.5},
		{Prompt: "a", Width: 64, Height: 64, Steps: 1, Method: "nope"},
		{Prompt: "a", Width: 64, Height: 64, Steps: 1, RNG: "nope"},
		{Prompt: "a", Width: 64, Height: 64, Steps: 1, Init: make([]float32, 5), Strength: 0.5},
	} {
		if _, err := m.Generate(req); err == nil {
			t.Errorf("%+v accepted", req)
		}
	}
}

// A size that is not a multiple of the network's is aligned up, as sd-cli
// aligns it (the CLI warns).
func TestGenerateAligns(t *testing.T) {
	m := inferutil.LoadTiny(t, "../../../testdata/tiny-sd1.gguf")
	if w, h, mult := m.AlignSize(60, 64); w != 64 || h != 64 || mult != 64 {
		t.Fatalf("AlignSize(60, 64) = %d, %d, %d", w, h, mult)
	}
	r, err := m.Generate(infer.Request{Prompt: "a", Width: 60, Height: 64, Steps: 1, CFGScale: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Width != 64 || r.Height != 64 || len(r.Pixels) != 3*64*64 {
		t.Errorf("result %dx%d with %d values, want 64x64", r.Width, r.Height, len(r.Pixels))
	}
}

// img2img starts from a sample of the VAE's latent distribution, mean +
// std·eps, as sd-cli does: with eps zero it is the mean (EncodeImage), and
// each value moves by eps times a positive std, the same for eps and -eps.
func TestEncodeLatentSamples(t *testing.T) {
	m := inferutil.LoadTiny(t, "../../../testdata/tiny-sd1.gguf")
	px := make([]float32, 3*64*64)
	for i := range px {
		px[i] = float32(i%97)/48 - 1
	}
	mean, err := m.EncodeImage(px, 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	zero, err := m.EncodeLatent(px, 64, 64, make([]float32, len(mean)))
	if err != nil || !slices.Equal(zero, mean) {
		t.Fatalf("eps 0: %v, not the mean", err)
	}
	one, minus := make([]float32, len(mean)), make([]float32, len(mean))
	for i := range one {
		one[i], minus[i] = 1, -1
	}
	up, _ := m.EncodeLatent(px, 64, 64, one)
	down, _ := m.EncodeLatent(px, 64, 64, minus)
	for i := range mean {
		d1, d2 := up[i]-mean[i], mean[i]-down[i]
		if !(d1 > 0) || math.Abs(float64(d1-d2)) > 1e-5*math.Max(1, math.Abs(float64(d1))) {
			t.Fatalf("value %d: mean %g, +eps %g, -eps %g", i, mean[i], up[i], down[i])
		}
	}
	if _, err := m.EncodeLatent(px, 64, 64, one[:3]); err == nil {
		t.Error("a short noise slice was accepted")
	}
}

func TestDetectConfigTiny(t *testing.T) {
	sh := map[string][]int64{}
	for _, ts := range synth.TinySD.Tensors() {
		sh[ts.Name] = ts.Shape
	}
	cfg, err := infer.DetectConfig(sh, synth.TinySD.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	u := unetOf(cfg)
	if u.ModelChannels != 32 || !slices.Equal(u.ChannelMult, []int{1, 1, 1, 1}) || u.NumResBlocks != 2 ||
		!slices.Equal(u.TransformerDepth, []int{1, 1, 1, 0}) || u.MiddleDepth != 1 || u.ContextDim != 64 || u.NumHeads != 8 || u.LinearProj {
		t.Errorf("UNet config %+v", u)
	}
	if c := clip.CLIPEncoders(cfg)[0]; c.Hidden != 64 || c.Layers != 2 || c.Heads != 2 || c.FF != 256 || !c.QuickGELU || c.Skip != 1 {
		t.Errorf("CLIP config %+v", c)
	}
	if v, kl := cfg.VAE, cfg.VAE.Layout.(*kl.KLConfig); v.Kind != "kl" || kl.Levels != 4 || kl.BlocksPerLevel != 3 || !v.HasEncoder {
		t.Errorf("VAE config %+v", v)
	}
	// Without the head override, a 64-wide context is taken for SD 2.x's
	// head width 64, which 32 channels cannot hold.
	if _, err = infer.DetectConfig(sh, nil); err == nil || !strings.Contains(err.Error(), "heads") {
		t.Errorf("no head override: err = %v", err)
	}
	delete(sh, "model.diffusion_model.out.2.weight")
	if _, err := infer.DetectConfig(sh, nil); err == nil {
		t.Error("a UNet without out.2 was accepted")
	}
}

// qualityModel is a seeded SD1-layout model whose attention level is 256
// wide and whose text encoder is 256 wide, so that its linear weights are
// whole k-quant blocks.
var qualityModel = synth.SD{
	ModelChannels: 64, Mult: []int{1, 2, 4}, NumRes: 1, Depth: []int{0, 0, 2}, MiddleDepth: 2, UNetHeads: 4,
	TextHidden: 256, TextFF: 1024, TextLayers: 2, TextHeads: 4,
	VAECh: 32, VAEMult: []int{1, 1, 1, 1}, Words: synth.DefaultWords, Seed: 7, Type: formats.F32,
	Width: 64, Height: 64, Steps: 3,
}

func TestQuantizedQualityOrder(t *testing.T) {
	longtest.Skip(t, "renders of four quantized copies")
	if testing.Short() {
		t.Skip("builds and runs four models")
	}
	dir := t.TempDir()
	req := infer.Request{Prompt: "a photo of a cat", Negative: "blurry", Width: 64, Height: 64, Steps: 3, CFGScale: 5, Seed: 3, Method: infer.Euler}
	var ref *infer.Result
	psnr := map[formats.DType]float64{}
	types := []formats.DType{formats.F32, formats.Q8_0, formats.Q4_K, formats.Q2_K}
	if !longtest.Enabled() {
		// The ordering over four models is a sweep for the long run; by
		// default q8_0 alone stands for it (close to the float model).
		types = types[:2]
	}
	for _, typ := range types {
		c := qualityModel
		if typ != formats.F32 {
			c.Quant = typ
		}
		path := filepath.Join(dir, typ.String()+".gguf")
		if err := c.Write(path); err != nil {
			t.Fatal(err)
		}
		m := inferutil.LoadTiny(t, path)
		if typ != formats.F32 {
			var in, all int64
			for part, byType := range m.ParamsByType() {
				if part == family.KindVAE {
					continue
				}
				for ty, n := range byType {
					all += n
					if ty == typ {
						in += n
					}
				}
			}
			if frac := float64(in) / float64(all); frac < 0.5 {
				t.Errorf("%s: only %.0f%% of the UNet and text encoder parameters are %s", typ, 100*frac, typ)
			}
		}
		r, err := m.Generate(req)
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = r
			continue
		}
		a, _ := infer.ImageFromCHW(ref.Pixels, 64, 64)
		b, _ := infer.ImageFromCHW(r.Pixels, 64, 64)
		p, err := metrics.PSNR(a, b)
		if err != nil {
			t.Fatal(err)
		}
		cos, _ := metrics.CosineSimilarity(ref.Latent, r.Latent)
		psnr[typ] = p
		t.Logf("%s: PSNR %.2f dB, latent cosine %.5f", typ, p, cos)
	}
	if len(types) > 2 && !(psnr[formats.Q8_0] > psnr[formats.Q4_K] && psnr[formats.Q4_K] > psnr[formats.Q2_K]) {
		t.Errorf("PSNR not ordered q8_0 > q4_K > q2_K: %v", psnr)
	}
	// q8_0 keeps weights within about 0.4% (8-bit blocks): an 8-bit image
	// that far from the original would be visibly wrong below 30 dB.
	if p := psnr[formats.Q8_0]; !(p > 30) && !math.IsInf(p, 1) {
		t.Errorf("q8_0 PSNR %.2f dB, want above 30", p)
	}
}

func TestTinySD2Layout(t *testing.T) {
	longtest.Skip(t, "the SD 2.x layout's render")
	c := synth.TinySD
	c.SD2 = true
	path := filepath.Join(t.TempDir(), "sd2.gguf")
	if err := c.Write(path); err != nil {
		t.Fatal(err)
	}
	m := inferutil.LoadTiny(t, path)
	cfg := m.Config
	if cfg.Family != "sd2" || !unetOf(cfg).LinearProj || !clip.CLIPEncoders(cfg)[0].FusedQKV || clip.CLIPEncoders(cfg)[0].Skip != 2 || clip.CLIPEncoders(cfg)[0].QuickGELU || clip.CLIPEncoders(cfg)[0].PadID != 0 {
		t.Errorf("config %+v / %+v", unetOf(cfg), clip.CLIPEncoders(cfg)[0])
	}
	if !cfg.PredictionKnown {
		t.Error("prediction not probed")
	}
	req := infer.Request{Prompt: "a cat", Negative: "ugly", Width: 64, Height: 64, Steps: 2, CFGScale: 5, Seed: 9}
	a, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Latent, b.Latent) {
		t.Error("SD2 layout is not deterministic")
	}
	v, err := infer.Load(infer.Components{"model": path}, infer.LoadOptions{Threads: 1, Prediction: "v"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Config.Prediction != infer.VPrediction {
		t.Error("--prediction v was ignored")
	}
	vr, err := v.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Prediction == infer.EpsPrediction && slices.Equal(vr.Latent, a.Latent) {
		t.Error("v prediction gave the eps trajectory")
	}
}

// Detection on the real SD 1.5 shapes (synth's full-size sd1 layout) and
// on SD 2.x's (OpenCLIP-H width, linear projections).
func TestDetectConfigFullSize(t *testing.T) {
	ts, err := synth.Tensors(synth.Spec{Arch: "sd1"})
	if err != nil {
		t.Fatal(err)
	}
	sh := map[string][]int64{}
	for _, x := range ts {
		sh[x.Name] = x.Shape
	}
	cfg, err := infer.DetectConfig(sh, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, c := unetOf(cfg), clip.CLIPEncoders(cfg)[0]
	if cfg.Family != "sd1" || u.ModelChannels != 320 || !slices.Equal(u.ChannelMult, []int{1, 2, 4, 4}) || u.NumHeads != 8 ||
		u.ContextDim != 768 || c.Layers != 12 || c.Heads != 12 || c.Vocab != 49408 || !c.QuickGELU || c.Skip != 1 ||
		cfg.Prediction != infer.EpsPrediction || !cfg.PredictionKnown {
		t.Errorf("SD 1.5: %+v %+v %+v", cfg, u, c)
	}
	sd2 := synth.FullSD15
	sd2.SD2, sd2.TextHidden, sd2.TextFF, sd2.TextLayers = true, 1024, 4096, 23
	sh = map[string][]int64{}
	m := &inferutil.MemModel{}
	for _, x := range sd2.Tensors() {
		m.TensorList = append(m.TensorList, formats.Tensor{Name: x.Name, Type: formats.F16, Shape: x.Shape})
	}
	specs, err := infer.SelectWeights(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		sh[s.Name] = s.Shape
	}
	cfg, err = infer.DetectConfig(sh, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, c = unetOf(cfg), clip.CLIPEncoders(cfg)[0]
	if cfg.Family != "sd2" || u.HeadDim != 64 || u.heads(320) != 5 || u.heads(1280) != 20 || !u.LinearProj ||
		c.Heads != 16 || !c.FusedQKV || c.QuickGELU || c.Skip != 2 || c.PadID != 0 || cfg.PredictionKnown {
		t.Errorf("SD 2.x: %+v %+v %+v", cfg, u, c)
	}
}

// --vae with a file holding the same VAE gives the same image; one without a VAE is refused.
func TestSeparateVAE(t *testing.T) {
	longtest.Skip(t, "a render with a separate VAE file")
	m := inferutil.LoadTiny(t, "../../../testdata/tiny-sd1.gguf")
	v, err := infer.Load(infer.Components{"model": "../../../testdata/tiny-sd1.gguf", "vae": "../../../testdata/tiny-sd1.gguf"}, infer.LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	req := infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 1, Seed: 4}
	a, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Pixels, b.Pixels) {
		t.Error("the same VAE from --vae gave another image")
	}
	// A file without VAE tensors.
	path := filepath.Join(t.TempDir(), "novae.gguf")
	var buf bytes.Buffer
	w, err := gguf.NewWriter(&buf, []formats.Tensor{{Name: "x.weight", Type: formats.F32, Shape: []int64{4}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, 16))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, buf.Bytes(), 0o644)
	if _, err := infer.Load(infer.Components{"model": "../../../testdata/tiny-sd1.gguf", "vae": path}, infer.LoadOptions{Threads: 1}); err == nil || !strings.Contains(err.Error(), "no VAE tensors") {
		t.Errorf("a --vae without VAE tensors: err = %v", err)
	}
}

// unetOf returns a UNet family's network configuration, nil for another network.
func unetOf(cfg *infer.ModelConfig) *UNetConfig {
	u, _ := cfg.Network.(*UNetConfig)
	return u
}

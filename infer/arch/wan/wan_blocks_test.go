//go:build cgo

package wan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/native"
)

// The Wan DiT against a plain-Go float64 reference written from Wan's
// definition (the reference implementation's WanModel: Conv3d patches,
// sinusoidal time embedding, blocks with a (1, 6, dim) modulation, complex
// RoPE over (frame, row, column) with 44/42/42-wide axes, the modulated
// head and its unpatchify), on tiny random weights.

// wanTestCfg is a tiny Wan: two heads of 128 (the RoPE split needs 128),
// FF 64, 4 latent channels, text tokens 24 wide, a 16-wide time embedding.
var wanTestCfg = WanConfig{Prefix: infer.DmPrefix, Hidden: 256, Heads: 2, HeadDim: 128, Blocks: 2, FF: 64, InChannels: 4, OutChannels: 4,
	PatchT: 1, PatchH: 2, PatchW: 2, TextDim: 24, FreqDim: 16, CrossNorm: true, Axes: wanAxes(128), Theta: 10000}

// wanTestWeights makes random f32 weights of cfg in sd.cpp's internal names.
func wanTestWeights(r *rand.Rand, cfg WanConfig) map[string]inferutil.TestWeight {
	h, ff := int64(cfg.Hidden), int64(cfg.FF)
	w := map[string]inferutil.TestWeight{}
	add := func(name string, std float64, offset float32, shape ...int64) {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		d := inferutil.Randn(r, int(n), std)
		for i := range d {
			d[i] += offset
		}
		w[cfg.Prefix+name] = inferutil.TestWeight{Shape: shape, Typ: formats.F32, Data: d}
	}
	lin := func(name string, out, in int64) {
		add(name+".weight", 1/math.Sqrt(float64(in)), 0, out, in)
		add(name+".bias", 0.05, 0, out)
	}
	add("patch_embedding.weight", 0.3, 0, h, int64(cfg.InChannels), 1, 2, 2)
	add("patch_embedding.bias", 0.05, 0, h)
	lin("text_embedding.0", h, int64(cfg.TextDim))
	lin("text_embedding.2", h, h)
	lin("time_embedding.0", h, int64(cfg.FreqDim))
	lin("time_embedding.2", h, h)
	lin("time_projection.1", 6*h, h)
	for i := 0; i < cfg.Blocks; i++ {
		b := fmt.Sprintf("blocks.%d.", i)
		add(b+"modulation", 0.2, 0, 1, 6, h)
		for _, a := range []string{"self_attn.", "cross_attn."} {
			for _, l := range []string{"q", "k", "v", "o"} {
				lin(b+a+l, h, h)
			}
			add(b+a+"norm_q.weight", 0.2, 1, h)
			add(b+a+"norm_k.weight", 0.2, 1, h)
		}
		add(b+"norm3.weight", 0.2, 1, h)
		add(b+"norm3.bias", 0.1, 0, h)
		lin(b+"ffn.0", ff, h)
		lin(b+"ffn.2", h, ff)
	}
	add("head.modulation", 0.2, 0, 1, 2, h)
	lin("head.head", int64(cfg.OutChannels*4), h)
	return w
}

// refWan is the reference DiT: latent x [C][T][H][W], text tokens ctx
// [Lc][TextDim] and timesteps ts (one for all frames, or one per frame as
// image-to-video gives them: each frame's tokens modulated by its own) to
// the output latent [C][T][H][W].
func refWan(t *testing.T, w map[string]inferutil.TestWeight, cfg WanConfig, x []float32, frames, hh, ww int, ctx []float32, lc int, ts []float64) []float32 {
	get := func(name string) []float32 { return inferutil.Stored(t, w[cfg.Prefix+name]) }
	hd, nh, d := cfg.Hidden, cfg.Heads, cfg.HeadDim
	lin := func(v []float64, name string) []float64 {
		wt, b := get(name+".weight"), get(name+".bias")
		out := len(b)
		y := make([]float64, out)
		for o := range y {
			y[o] = float64(b[o])
			for j := range v {
				y[o] += float64(wt[o*len(v)+j]) * v[j]
			}
		}
		return y
	}
	ln := func(v []float64) []float64 {
		var m, s float64
		for _, a := range v {
			m += a
		}
		m /= float64(len(v))
		for _, a := range v {
			s += (a - m) * (a - m)
		}
		r := 1 / math.Sqrt(s/float64(len(v))+1e-6)
		out := make([]float64, len(v))
		for i, a := range v {
			out[i] = (a - m) * r
		}
		return out
	}
	rms := func(v []float64, scale []float32) []float64 {
		var s float64
		for _, a := range v {
			s += a * a
		}
		r := 1 / math.Sqrt(s/float64(len(v))+1e-6)
		out := make([]float64, len(v))
		for i, a := range v {
			out[i] = a * r * float64(scale[i])
		}
		return out
	}
	silu := func(v []float64) []float64 {
		out := make([]float64, len(v))
		for i, a := range v {
			out[i] = a / (1 + math.Exp(-a))
		}
		return out
	}
	gelu := func(v []float64) []float64 {
		out := make([]float64, len(v))
		for i, a := range v {
			out[i] = inferutil.GELUTanh(a)
		}
		return out
	}
	// Patches: Conv3d with kernel = stride = (1, 2, 2).
	rows, cols := hh/2, ww/2
	pe, pb := get("patch_embedding.weight"), get("patch_embedding.bias")
	var tok [][]float64
	var pos [][3]float64
	for f := 0; f < frames; f++ {
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				v := make([]float64, hd)
				for o := range v {
					v[o] = float64(pb[o])
					for c := 0; c < cfg.InChannels; c++ {
						for kh := 0; kh < 2; kh++ {
							for kw := 0; kw < 2; kw++ {
								v[o] += float64(pe[((o*cfg.InChannels+c)*2+kh)*2+kw]) * float64(x[((c*frames+f)*hh+2*i+kh)*ww+2*j+kw])
							}
						}
					}
				}
				tok = append(tok, v)
				pos = append(pos, [3]float64{float64(f), float64(i), float64(j)})
			}
		}
	}
	// Sinusoidal time embedding [cos | sin], then the two MLPs, per frame.
	half := cfg.FreqDim / 2
	e, e0 := make([][]float64, frames), make([][]float64, frames)
	for f := range frames {
		tf := ts[min(f, len(ts)-1)]
		emb := make([]float64, cfg.FreqDim)
		for k := 0; k < half; k++ {
			fr := math.Exp(-math.Log(10000) * float64(k) / float64(half))
			emb[k], emb[half+k] = math.Cos(tf*fr), math.Sin(tf*fr)
		}
		e[f] = lin(silu(lin(emb, "time_embedding.0")), "time_embedding.2")
		e0[f] = lin(silu(e[f]), "time_projection.1") // [6][hd]
	}
	frameOf := func(n int) int { return n / (rows * cols) }
	var txt [][]float64
	for i := 0; i < lc; i++ {
		v := make([]float64, cfg.TextDim)
		for j := range v {
			v[j] = float64(ctx[i*cfg.TextDim+j])
		}
		txt = append(txt, lin(gelu(lin(v, "text_embedding.0")), "text_embedding.2"))
	}
	// RoPE: pair k of a head rotates by pos[axis]·theta^(-2j/axisWidth).
	type pair struct {
		axis int
		freq float64
	}
	var pairs []pair
	for a, width := range cfg.Axes {
		for j := 0; j < width/2; j++ {
			pairs = append(pairs, pair{a, math.Pow(float64(cfg.Theta), -2*float64(j)/float64(width))})
		}
	}
	rope := func(v []float64, p [3]float64) {
		for hh := 0; hh < nh; hh++ {
			for k, pr := range pairs {
				a, b := v[hh*d+2*k], v[hh*d+2*k+1]
				ang := p[pr.axis] * pr.freq
				v[hh*d+2*k], v[hh*d+2*k+1] = a*math.Cos(ang)-b*math.Sin(ang), a*math.Sin(ang)+b*math.Cos(ang)
			}
		}
	}
	attend := func(q, k, v [][]float64) [][]float64 {
		out := make([][]float64, len(q))
		for i := range q {
			out[i] = make([]float64, hd)
			for hh := 0; hh < nh; hh++ {
				s := make([]float64, len(k))
				mx := math.Inf(-1)
				for j := range k {
					for c := 0; c < d; c++ {
						s[j] += q[i][hh*d+c] * k[j][hh*d+c]
					}
					s[j] /= math.Sqrt(float64(d))
					mx = math.Max(mx, s[j])
				}
				var z float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					z += s[j]
				}
				for j := range s {
					for c := 0; c < d; c++ {
						out[i][hh*d+c] += s[j] / z * v[j][hh*d+c]
					}
				}
			}
		}
		return out
	}
	modulate := func(v []float64, shift, scale []float64) []float64 {
		y := ln(v)
		for i := range y {
			y[i] = y[i]*(1+scale[i]) + shift[i]
		}
		return y
	}
	for bi := 0; bi < cfg.Blocks; bi++ {
		b := fmt.Sprintf("blocks.%d.", bi)
		mt := get(b + "modulation")
		mf := make([][][]float64, frames) // [frame][6][hd]
		for f := range mf {
			mf[f] = make([][]float64, 6)
			for k := range mf[f] {
				mf[f][k] = make([]float64, hd)
				for j := range mf[f][k] {
					mf[f][k][j] = e0[f][k*hd+j] + float64(mt[k*hd+j])
				}
			}
		}
		q, k, v := make([][]float64, len(tok)), make([][]float64, len(tok)), make([][]float64, len(tok))
		for i := range tok {
			m := mf[frameOf(i)]
			y := modulate(tok[i], m[0], m[1])
			q[i] = rms(lin(y, b+"self_attn.q"), get(b+"self_attn.norm_q.weight"))
			k[i] = rms(lin(y, b+"self_attn.k"), get(b+"self_attn.norm_k.weight"))
			v[i] = lin(y, b+"self_attn.v")
			rope(q[i], pos[i])
			rope(k[i], pos[i])
		}
		a := attend(q, k, v)
		for i := range tok {
			o := lin(a[i], b+"self_attn.o")
			for j := range tok[i] {
				tok[i][j] += o[j] * mf[frameOf(i)][2][j]
			}
		}
		ck, cv := make([][]float64, len(txt)), make([][]float64, len(txt))
		for i := range txt {
			ck[i] = rms(lin(txt[i], b+"cross_attn.k"), get(b+"cross_attn.norm_k.weight"))
			cv[i] = lin(txt[i], b+"cross_attn.v")
		}
		cq := make([][]float64, len(tok))
		n3w, n3b := get(b+"norm3.weight"), get(b+"norm3.bias")
		for i := range tok {
			y := ln(tok[i])
			for j := range y {
				y[j] = y[j]*float64(n3w[j]) + float64(n3b[j])
			}
			cq[i] = rms(lin(y, b+"cross_attn.q"), get(b+"cross_attn.norm_q.weight"))
		}
		ca := attend(cq, ck, cv)
		for i := range tok {
			m := mf[frameOf(i)]
			o := lin(ca[i], b+"cross_attn.o")
			for j := range tok[i] {
				tok[i][j] += o[j]
			}
			y := lin(gelu(lin(modulate(tok[i], m[3], m[4]), b+"ffn.0")), b+"ffn.2")
			for j := range tok[i] {
				tok[i][j] += y[j] * m[5][j]
			}
		}
	}
	hm := get("head.modulation")
	c := cfg.OutChannels
	out := make([]float32, c*frames*hh*ww)
	for n := range tok {
		f, i, j := frameOf(n), n/cols%rows, n%cols
		shift, scale := make([]float64, hd), make([]float64, hd)
		for k := 0; k < hd; k++ {
			shift[k], scale[k] = float64(hm[k])+e[f][k], float64(hm[hd+k])+e[f][k]
		}
		y := lin(modulate(tok[n], shift, scale), "head.head")
		for kh := 0; kh < 2; kh++ {
			for kw := 0; kw < 2; kw++ {
				for ch := 0; ch < c; ch++ {
					out[((ch*frames+f)*hh+2*i+kh)*ww+2*j+kw] = float32(y[(kh*2+kw)*c+ch])
				}
			}
		}
	}
	return out
}

// wanTestModel is a Model holding only the given weights, enough for runNet.
func wanTestModel(t *testing.T, w map[string]inferutil.TestWeight, cfg *WanConfig) *infer.Model {
	t.Helper()
	be, err := native.NewCPUBackend(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Free)
	ws := inferutil.MakeWeights(t, be, w)
	alloc := be.NewAllocator()
	t.Cleanup(alloc.Free)
	return &infer.Model{Path: "wan test", Config: &infer.ModelConfig{Network: cfg}, Backend: be, Weights: ws, Alloc: alloc, Net: &wanNet{cfg: cfg}}
}

func TestWanMatchesReference(t *testing.T) {
	for _, c := range []struct {
		name               string
		frames, h, w, text int
		t                  float32
		frameT             []float32 // image-to-video's per-frame timesteps
	}{
		{"one frame", 1, 4, 6, 3, 999, nil},
		{"three frames", 3, 4, 4, 5, 437.5, nil},
		{"three frames, first held", 3, 4, 4, 5, 437.5, []float32{0, 437.5, 437.5}},
		{"two frames, each its own", 2, 4, 6, 3, 999, []float32{999, 250}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(c.frames)))
			cfg := wanTestCfg
			w := wanTestWeights(r, cfg)
			m := wanTestModel(t, w, &cfg)
			x := inferutil.Randn(r, cfg.InChannels*c.frames*c.h*c.w, 1)
			ctx := inferutil.Randn(r, c.text*cfg.TextDim, 1)
			cond := &infer.Conditioning{Context: ctx, Tokens: c.text, Dim: cfg.TextDim}
			var blocks []infer.BlockOutput
			got, err := m.RunNet(&infer.NetInput{X: x, W: c.w, H: c.h, Frames: c.frames, T: c.t, FrameT: c.frameT, Cond: cond}, &blocks)
			if err != nil {
				t.Fatal(err)
			}
			if len(blocks) != cfg.Blocks {
				t.Errorf("%d block outputs, want %d", len(blocks), cfg.Blocks)
			}
			ts := []float64{float64(c.t)}
			if c.frameT != nil {
				ts = ts[:0]
				for _, v := range c.frameT {
					ts = append(ts, float64(v))
				}
			}
			want := refWan(t, w, cfg, x, c.frames, c.h, c.w, ctx, c.text, ts)
			e := inferutil.MaxRelErr(t, got, want)
			if e > 5e-3 {
				t.Errorf("relative error %g > 5e-3", e)
			}
			t.Logf("relative error %.3g", e)
		})
	}
}

// TestWanReferenceIsSensitive guards the comparison: the graph with the
// RoPE axes in the wrong order (rows rotated as frames), or with the
// per-frame timesteps in other frames, must not pass it.
func TestWanReferenceIsSensitive(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	cfg := wanTestCfg
	cfg.Blocks = 1
	w := wanTestWeights(r, cfg)
	wrong := cfg
	wrong.Axes = []int{cfg.Axes[1], cfg.Axes[0], cfg.Axes[2]}
	m := wanTestModel(t, w, &wrong)
	const frames, h, wd, text = 3, 4, 4, 2
	x := inferutil.Randn(r, cfg.InChannels*frames*h*wd, 1)
	ctx := inferutil.Randn(r, text*cfg.TextDim, 1)
	got, err := m.RunNet(&infer.NetInput{X: x, W: wd, H: h, Frames: frames, T: 500, Cond: &infer.Conditioning{Context: ctx, Tokens: text, Dim: cfg.TextDim}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := inferutil.MaxRelErr(t, got, refWan(t, w, cfg, x, frames, h, wd, ctx, text, []float64{500})); e < 1e-2 {
		t.Errorf("swapped RoPE axes give relative error %g, too close to tell", e)
	}
	// Per-frame timesteps given to the wrong frames must not pass either.
	m = wanTestModel(t, w, &cfg)
	got, err = m.RunNet(&infer.NetInput{X: x, W: wd, H: h, Frames: frames, T: 500, FrameT: []float32{0, 500, 500},
		Cond: &infer.Conditioning{Context: ctx, Tokens: text, Dim: cfg.TextDim}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := inferutil.MaxRelErr(t, got, refWan(t, w, cfg, x, frames, h, wd, ctx, text, []float64{500, 500, 0})); e < 1e-2 {
		t.Errorf("per-frame timesteps in the wrong frames give relative error %g, too close to tell", e)
	}
}

// wanShapes are the internal-name shapes of a Wan DiT under dmPrefix.
func wanShapes(c WanConfig) map[string][]int64 {
	w := wanTestWeights(rand.New(rand.NewPCG(1, 1)), c)
	sh := map[string][]int64{}
	for n, tw := range w {
		sh[n] = tw.Shape
	}
	return sh
}

func TestDetectWan(t *testing.T) {
	want := wanTestCfg
	sh := wanShapes(want)
	got, err := detectWan(sh, infer.DmPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("got %+v\nwant %+v", *got, want)
	}
	// The kernel as sd.cpp holds a Conv3d (its GGUF files) reads alike.
	sh[infer.DmPrefix+"patch_embedding.weight"] = []int64{256 * 4, 1, 2, 2}
	if got, err := detectWan(sh, infer.DmPrefix); err != nil || got.InChannels != 4 || got.Hidden != 256 {
		t.Errorf("4-D patch embedding: %+v, %v", got, err)
	}
	for _, c := range []struct {
		edit func(map[string][]int64)
		want string
	}{
		{func(s map[string][]int64) { delete(s, infer.DmPrefix+"blocks.1.cross_attn.norm_k.weight") }, "blocks.1.cross_attn.norm_k.weight"},
		{func(s map[string][]int64) { s[infer.DmPrefix+"blocks.0.ffn.2.weight"] = []int64{256, 32} }, "blocks.0.ffn.2.weight"},
		{func(s map[string][]int64) { s[infer.DmPrefix+"patch_embedding.weight"] = []int64{256, 4, 2, 2, 2} }, "patch_embedding.weight"},
		{func(s map[string][]int64) { s[infer.DmPrefix+"head.head.weight"] = []int64{15, 256} }, "head.head.weight"},
		// The image-to-video DiTs are refused, saying what they need.
		{func(s map[string][]int64) { s[infer.DmPrefix+"blocks.0.cross_attn.k_img.weight"] = []int64{256, 256} }, "CLIP vision (ViT-H)"},
		{func(s map[string][]int64) { s[infer.DmPrefix+"patch_embedding.weight"] = []int64{256, 9, 1, 2, 2} }, "9-channel input"},
	} {
		s := wanShapes(want)
		c.edit(s)
		if _, err := detectWan(s, infer.DmPrefix); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %s, got %v", c.want, err)
		}
	}
}

func TestFoldDims(t *testing.T) {
	if got := infer.FoldDims([]int64{5120, 16, 1, 2, 2}); fmt.Sprint(got) != "[81920 1 2 2]" {
		t.Errorf("5-D: %v", got)
	}
	if got := infer.FoldDims([]int64{3, 4}); fmt.Sprint(got) != "[3 4]" {
		t.Errorf("2-D: %v", got)
	}
}

// TestWanDiscreteFlowSigmas checks sd-cli's shifted flow schedule against its
// formula worked by hand: sigma(t) = 5s/(1+4s), s = (t+1)/1000, and the
// network's timestep sigma·1000.
func TestWanDiscreteFlowSigmas(t *testing.T) {
	s := &infer.DiscreteFlowSchedule{Shift: 5}
	for _, c := range []struct{ t, want float32 }{{999, 1}, {499, 2.5 / 3}, {0, 0.005 / 1.004}} {
		if got := s.TToSigma(c.t); math.Abs(float64(got-c.want)) > 1e-6 {
			t.Errorf("sigma(%g) = %g, want %g", c.t, got, c.want)
		}
	}
	if got := s.SigmaToT(0.25); got != 250 {
		t.Errorf("timestep of 0.25: %g", got)
	}
	sig, err := s.Sigmas(infer.SchedulerDiscrete, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Three steps: timesteps 999, 499.5, 0, then 0.
	want := []float32{1, 5 * 0.5005 / (1 + 4*0.5005), 0.005 / 1.004, 0}
	for i := range want {
		if math.Abs(float64(sig[i]-want[i])) > 1e-6 {
			t.Errorf("sigmas %v, want %v", sig, want)
			break
		}
	}
	if (&infer.DiscreteFlowSchedule{Shift: 1}).TToSigma(249) != 0.25 {
		t.Error("shift 1 is not the identity")
	}
}

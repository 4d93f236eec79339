//go:build cgo

package qwenimage

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/arch/flux"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/native"
)

// Qwen-Image's DiT against a plain-Go reference in float64: the RoPE
// positions against a hand-written table, and the whole network (time
// embedding, text norm, two dual-stream blocks, norm_out) at small widths.

func TestQwenImagePositions(t *testing.T) {
	// Two text tokens and a 2×3 grid: text starts at max(2, 3)/2 = 1 on
	// every axis, the grid is centred (rows -1..0, columns -1..1).
	want := [][3]float32{
		{1, 1, 1}, {2, 2, 2},
		{0, -1, -1}, {0, -1, 0}, {0, -1, 1},
		{0, 0, -1}, {0, 0, 0}, {0, 0, 1},
	}
	got := qwenImagePositions(2, 2, 3)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("positions %v, want %v", got, want)
	}
	// A 4×4 grid: text from 2, rows and columns -2..1.
	got = qwenImagePositions(1, 4, 4)
	if got[0] != [3]float32{2, 2, 2} || got[1] != [3]float32{0, -2, -2} || got[16] != [3]float32{0, 1, 1} {
		t.Errorf("4×4 positions %v", got)
	}
}

func TestQwenImageRoPETable(t *testing.T) {
	axes := []int{16, 56, 56}
	pos := qwenImagePositions(3, 2, 5)
	cos, sin := flux.RoPETable(axes, 10000, pos)
	const half = 64
	for tok, p := range pos {
		for k := 0; k < half; k++ {
			a := inferutil.RefRoPEAngle(axes, 10000, [3]float64{float64(p[0]), float64(p[1]), float64(p[2])}, k)
			if d := math.Abs(float64(cos[tok*half+k]) - math.Cos(a)); d > 2e-5 {
				t.Fatalf("token %d pair %d: cos %g, want %g", tok, k, cos[tok*half+k], math.Cos(a))
			}
			if d := math.Abs(float64(sin[tok*half+k]) - math.Sin(a)); d > 2e-5 {
				t.Fatalf("token %d pair %d: sin %g, want %g", tok, k, sin[tok*half+k], math.Sin(a))
			}
		}
	}
}

// qiRef evaluates the Qwen-Image DiT in float64 from its test weights.
type qiRef struct {
	w                map[string]inferutil.TestWeight
	hidden, heads, d int
	axes             []int
}

func (r *qiRef) vec(name string) []float64 {
	tw, ok := r.w[name]
	if !ok {
		panic("no weight " + name)
	}
	out := make([]float64, len(tw.Data))
	for i, v := range tw.Data {
		out[i] = float64(v)
	}
	return out
}

// lin applies name.weight [out, in] and name.bias to each row of x.
func (r *qiRef) lin(x [][]float64, name string) [][]float64 {
	w, b := r.vec(name+".weight"), r.vec(name+".bias")
	out := make([][]float64, len(x))
	for i, row := range x {
		o := make([]float64, len(b))
		for j := range o {
			acc := b[j]
			for k, v := range row {
				acc += w[j*len(row)+k] * v
			}
			o[j] = acc
		}
		out[i] = o
	}
	return out
}

func qiMap(x [][]float64, f func(float64) float64) [][]float64 {
	out := make([][]float64, len(x))
	for i, row := range x {
		out[i] = make([]float64, len(row))
		for j, v := range row {
			out[i][j] = f(v)
		}
	}
	return out
}

func qiSiLU(v float64) float64 { return v / (1 + math.Exp(-v)) }

// qiNorm is a layer norm without affine parameters (rms: an RMS norm) of
// every length-n group of each row, times weight when not nil.
func qiNorm(x [][]float64, n int, rms bool, weight []float64) [][]float64 {
	out := make([][]float64, len(x))
	for i, row := range x {
		out[i] = make([]float64, len(row))
		for g := 0; g < len(row); g += n {
			seg := row[g : g+n]
			var mean, v float64
			if !rms {
				for _, a := range seg {
					mean += a
				}
				mean /= float64(n)
			}
			for _, a := range seg {
				v += (a - mean) * (a - mean)
			}
			v /= float64(n)
			for j, a := range seg {
				y := (a - mean) / math.Sqrt(v+qwenImageEps)
				if weight != nil {
					y *= weight[j]
				}
				out[i][g+j] = y
			}
		}
	}
	return out
}

// mod returns the n chunks of name's linear over SiLU(temb).
func (r *qiRef) mod(temb []float64, name string, n int) [][]float64 {
	m := r.lin([][]float64{qiMap([][]float64{temb}, qiSiLU)[0]}, name)[0]
	out := make([][]float64, n)
	for i := range out {
		out[i] = m[i*r.hidden : (i+1)*r.hidden]
	}
	return out
}

// modulate is x·(1+scale)+shift on every row, then times gate when not nil.
func qiModulate(x [][]float64, shift, scale []float64) [][]float64 {
	out := make([][]float64, len(x))
	for i, row := range x {
		out[i] = make([]float64, len(row))
		for j, v := range row {
			out[i][j] = v*(1+scale[j]) + shift[j]
		}
	}
	return out
}

// addGated returns x + y·gate.
func qiAddGated(x, y [][]float64, gate []float64) [][]float64 {
	out := make([][]float64, len(x))
	for i := range x {
		out[i] = make([]float64, len(x[i]))
		for j := range x[i] {
			out[i][j] = x[i][j] + y[i][j]*gate[j]
		}
	}
	return out
}

// attention is joint attention over rows q, k, v [L][heads·d] whose
// adjacent pairs turn by the RoPE angle of each token's position.
func (r *qiRef) attention(q, k, v [][]float64, pos [][3]float32) [][]float64 {
	rot := func(x [][]float64) [][]float64 {
		out := make([][]float64, len(x))
		for t, row := range x {
			out[t] = make([]float64, len(row))
			p := [3]float64{float64(pos[t][0]), float64(pos[t][1]), float64(pos[t][2])}
			for h := 0; h < r.heads; h++ {
				for j := 0; j < r.d/2; j++ {
					a := inferutil.RefRoPEAngle(r.axes, 10000, p, j)
					i := h*r.d + 2*j
					out[t][i] = row[i]*math.Cos(a) - row[i+1]*math.Sin(a)
					out[t][i+1] = row[i]*math.Sin(a) + row[i+1]*math.Cos(a)
				}
			}
		}
		return out
	}
	q, k = rot(q), rot(k)
	l := len(q)
	out := make([][]float64, l)
	for i := range out {
		out[i] = make([]float64, r.heads*r.d)
		for h := 0; h < r.heads; h++ {
			s := make([]float64, l)
			m := math.Inf(-1)
			for j := 0; j < l; j++ {
				for e := 0; e < r.d; e++ {
					s[j] += q[i][h*r.d+e] * k[j][h*r.d+e]
				}
				s[j] /= math.Sqrt(float64(r.d))
				m = math.Max(m, s[j])
			}
			var z float64
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				z += s[j]
			}
			for e := 0; e < r.d; e++ {
				for j := 0; j < l; j++ {
					out[i][h*r.d+e] += s[j] / z * v[j][h*r.d+e]
				}
			}
		}
	}
	return out
}

// block is transformer_blocks.i in float64.
func (r *qiRef) block(p string, img, txt [][]float64, temb []float64, pos [][3]float32) ([][]float64, [][]float64) {
	im, tm := r.mod(temb, p+"img_mod.1", 6), r.mod(temb, p+"txt_mod.1", 6)
	iy := qiModulate(qiNorm(img, r.hidden, false, nil), im[0], im[1])
	ty := qiModulate(qiNorm(txt, r.hidden, false, nil), tm[0], tm[1])
	a := p + "attn."
	heads := func(x [][]float64, proj, norm string) [][]float64 {
		y := r.lin(x, a+proj)
		if norm == "" {
			return y
		}
		return qiNorm(y, r.d, true, r.vec(a+norm+".weight"))
	}
	q := append(heads(ty, "add_q_proj", "norm_added_q"), heads(iy, "to_q", "norm_q")...)
	k := append(heads(ty, "add_k_proj", "norm_added_k"), heads(iy, "to_k", "norm_k")...)
	v := append(heads(ty, "add_v_proj", ""), heads(iy, "to_v", "")...)
	o := r.attention(q, k, v, pos)
	lt := len(txt)
	img = qiAddGated(img, r.lin(o[lt:], a+"to_out.0"), im[2])
	txt = qiAddGated(txt, r.lin(o[:lt], a+"to_add_out"), tm[2])
	mlp := func(x [][]float64, mod [][]float64, st string) [][]float64 {
		y := qiModulate(qiNorm(x, r.hidden, false, nil), mod[3], mod[4])
		y = r.lin(qiMap(r.lin(y, p+st+"_mlp.net.0.proj"), inferutil.GELUTanh), p+st+"_mlp.net.2")
		return qiAddGated(x, y, mod[5])
	}
	return mlp(img, im, "img"), mlp(txt, tm, "txt")
}

// forward is the whole DiT: patch tokens img, text states txt, timestep t.
func (r *qiRef) forward(img, txt [][]float64, t float64, layers int, pos [][3]float32) [][]float64 {
	p := infer.DmPrefix
	emb := make([]float64, 256)
	for i := 0; i < 128; i++ {
		f := math.Exp(-math.Log(10000) * float64(i) / 128)
		emb[i], emb[128+i] = math.Cos(t*f), math.Sin(t*f)
	}
	te := p + "time_text_embed.timestep_embedder."
	temb := r.lin(qiMap(r.lin([][]float64{emb}, te+"linear_1"), qiSiLU), te+"linear_2")[0]
	x := r.lin(img, p+"img_in")
	c := r.lin(qiNorm(txt, len(txt[0]), true, r.vec(p+"txt_norm.weight")), p+"txt_in")
	for i := 0; i < layers; i++ {
		x, c = r.block(fmt.Sprintf("%stransformer_blocks.%d.", p, i), x, c, temb, pos)
	}
	m := r.mod(temb, p+"norm_out.linear", 2) // scale, shift
	return r.lin(qiModulate(qiNorm(x, r.hidden, false, nil), m[1], m[0]), p+"proj_out")
}

// qwenImageTestWeights are random weights of a Qwen-Image DiT (full names).
func qwenImageTestWeights(r *rand.Rand, cfg *QwenImageConfig) map[string]inferutil.TestWeight {
	w := map[string]inferutil.TestWeight{}
	lin := func(name string, out, in int) {
		w[name+".weight"] = inferutil.TestWeight{Shape: []int64{int64(out), int64(in)}, Typ: formats.F32, Data: inferutil.Randn(r, out*in, 1/math.Sqrt(float64(in)))}
		w[name+".bias"] = inferutil.TestWeight{Shape: []int64{int64(out)}, Typ: formats.F32, Data: inferutil.Randn(r, out, 0.1)}
	}
	norm := func(name string, n int) {
		d := inferutil.Randn(r, n, 0.1)
		for i := range d {
			d[i]++
		}
		w[name+".weight"] = inferutil.TestWeight{Shape: []int64{int64(n)}, Typ: formats.F32, Data: d}
	}
	p, h := infer.DmPrefix, cfg.Hidden
	lin(p+"img_in", h, cfg.InChannels)
	lin(p+"txt_in", h, cfg.ContextDim)
	norm(p+"txt_norm", cfg.ContextDim)
	lin(p+"time_text_embed.timestep_embedder.linear_1", h, 256)
	lin(p+"time_text_embed.timestep_embedder.linear_2", h, h)
	lin(p+"norm_out.linear", 2*h, h)
	lin(p+"proj_out", cfg.OutChannels, h)
	for i := 0; i < cfg.Layers; i++ {
		b := fmt.Sprintf("%stransformer_blocks.%d.", p, i)
		for _, st := range []string{"img", "txt"} {
			lin(b+st+"_mod.1", 6*h, h)
			lin(b+st+"_mlp.net.0.proj", cfg.MLP, h)
			lin(b+st+"_mlp.net.2", h, cfg.MLP)
		}
		for _, n := range []string{"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"} {
			lin(b+"attn."+n, h, h)
		}
		for _, n := range []string{"norm_q", "norm_k", "norm_added_q", "norm_added_k"} {
			norm(b+"attn."+n, cfg.HeadDim)
		}
	}
	return w
}

func rows(x []float32, n int) [][]float64 {
	out := make([][]float64, len(x)/n)
	for i := range out {
		out[i] = make([]float64, n)
		for j := range out[i] {
			out[i][j] = float64(x[i*n+j])
		}
	}
	return out
}

func TestQwenImageNetwork(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(28, 1))
	cfg := &QwenImageConfig{Hidden: 16, Heads: 2, HeadDim: 8, Layers: 2, MLP: 64, InChannels: 8, OutChannels: 8,
		Patch: 2, ContextDim: 12, Axes: []int{2, 2, 4}, Theta: 10000}
	w := qwenImageTestWeights(r, cfg)
	ws := inferutil.MakeWeights(t, be, w)
	const lt, gridRows, gridCols, tstep = 3, 2, 3, 750.0
	li := gridRows * gridCols
	img, txt := inferutil.Randn(r, li*cfg.InChannels, 1), inferutil.Randn(r, lt*cfg.ContextDim, 1)
	pos := qwenImagePositions(lt, gridRows, gridCols)
	cos, sin := flux.RoPETable(cfg.Axes, cfg.Theta, pos)
	half := int64(cfg.HeadDim / 2)
	got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{
		{Ne: []int64{int64(cfg.InChannels), int64(li)}, Data: img}, {Ne: []int64{int64(cfg.ContextDim), lt}, Data: txt},
		{Ne: []int64{1}, Data: []float32{tstep}}, {Ne: []int64{half, int64(lt + li)}, Data: cos}, {Ne: []int64{half, int64(lt + li)}, Data: sin},
	}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
		out, _ := qwenImage(g, cfg, in[0], in[1], in[2], in[3], in[4], false)
		return out
	})
	if ne != [4]int64{int64(cfg.OutChannels), int64(li), 1, 1} {
		t.Fatalf("output %v", ne)
	}
	ref := &qiRef{w: w, hidden: cfg.Hidden, heads: cfg.Heads, d: cfg.HeadDim, axes: cfg.Axes}
	var want []float32
	for _, row := range ref.forward(rows(img, cfg.InChannels), rows(txt, cfg.ContextDim), tstep, cfg.Layers, pos) {
		for _, v := range row {
			want = append(want, float32(v))
		}
	}
	// ggml's GELU reads a table indexed by the f16 rounding of its input.
	e := inferutil.MaxRelErr(t, got, want)
	t.Logf("relative error %g", e)
	if e > 5e-3 {
		t.Errorf("relative error %g", e)
	}
	// The reference sees the text: other text states change the output.
	txt2 := append([]float32(nil), txt...)
	txt2[0] += 1
	other := ref.forward(rows(img, cfg.InChannels), rows(txt2, cfg.ContextDim), tstep, cfg.Layers, pos)
	if math.Abs(other[0][0]-float64(want[0])) < 1e-6 {
		t.Errorf("the output does not depend on the text")
	}
}

func TestDetectQwenImage(t *testing.T) {
	cfg := &QwenImageConfig{Hidden: 256, HeadDim: 128, Layers: 2, MLP: 1024, InChannels: 64, OutChannels: 64, ContextDim: 64}
	sh := map[string][]int64{}
	for n, tw := range qwenImageTestWeights(rand.New(rand.NewPCG(1, 1)), cfg) {
		sh[n] = tw.Shape
	}
	c, err := detectQwenImage(infer.Shapes(sh), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hidden != 256 || c.Heads != 2 || c.HeadDim != 128 || c.Layers != 2 || c.MLP != 1024 || c.ContextDim != 64 ||
		c.LatentChannels() != 16 || fmt.Sprint(c.Axes) != "[16 56 56]" || c.ZeroCondT {
		t.Errorf("config %+v", c)
	}
	fam, err := infer.DetectFamily(sh)
	if err != nil || fam.Name() != "qwen_image" {
		t.Errorf("family %v, %v", fam, err)
	}
	// Edit 2511's marker tensor is seen (the network then refuses to run
	// without reference images).
	sh[infer.DmPrefix+"__index_timestep_zero__"] = []int64{1}
	if c, err := detectQwenImage(infer.Shapes(sh), nil); err != nil || !c.ZeroCondT {
		t.Errorf("with __index_timestep_zero__: %+v, %v", c, err)
	}
	delete(sh, infer.DmPrefix+"__index_timestep_zero__")
	// A block missing a tensor, or misshapen, is named.
	name := infer.DmPrefix + "transformer_blocks.1.attn.to_add_out.weight"
	good := sh[name]
	delete(sh, name)
	if _, err := detectQwenImage(infer.Shapes(sh), nil); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("missing tensor: %v", err)
	}
	sh[name] = []int64{256, 100}
	if _, err := detectQwenImage(infer.Shapes(sh), nil); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("misshapen tensor: %v", err)
	}
	sh[name] = good
	// Narrower heads need the axes in the metadata.
	for n := range sh {
		if strings.Contains(n, "attn.norm_") {
			sh[n] = []int64{64}
		}
	}
	if _, err := detectQwenImage(infer.Shapes(sh), nil); err == nil || !strings.Contains(err.Error(), MetaQwenImageAxes) {
		t.Errorf("64-wide heads without axes: %v", err)
	}
	md := formats.Metadata{{Key: MetaQwenImageAxes, Type: formats.TypeString, Value: "8,28,28"}}
	if c, err := detectQwenImage(infer.Shapes(sh), md); err != nil || c.Heads != 4 || fmt.Sprint(c.Axes) != "[8 28 28]" {
		t.Errorf("64-wide heads with axes: %+v, %v", c, err)
	}
}

func TestDiscreteFlowSigmas(t *testing.T) {
	s := &infer.DiscreteFlowSchedule{Shift: 3}
	sig, err := s.Sigmas(infer.SchedulerDiscrete, 4)
	if err != nil || len(sig) != 5 || sig[4] != 0 {
		t.Fatalf("sigmas %v, %v", sig, err)
	}
	for i := 0; i < 4; i++ {
		u := (999 - 999*float64(i)/3 + 1) / 1000
		want := 3 * u / (1 + 2*u)
		if math.Abs(float64(sig[i])-want) > 1e-6 {
			t.Errorf("sigma %d is %g, want %g", i, sig[i], want)
		}
	}
	if s.SigmaToT(0.25) != 250 {
		t.Errorf("SigmaToT(0.25) = %g, want 250 (the DiT embeds sigma·1000)", s.SigmaToT(0.25))
	}
	if one := (&infer.DiscreteFlowSchedule{Shift: 1}).TToSigma(499); one != 0.5 {
		t.Errorf("shift 1: TToSigma(499) = %g, want 0.5", one)
	}
}

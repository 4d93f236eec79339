//go:build cgo

package sd

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/clip"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/tensor"
)

// SDXL's new blocks against plain-Go references: the conditioning vector,
// and the CLIP text model's penultimate hidden states without the final
// norm plus the pooled output through text_projection.

// refSinusoid is the sinusoidal embedding in float64: cos(t·f_j) then
// sin(t·f_j), f_j = 10000^(-j/(dim/2)).
func refSinusoid(t float64, dim int) []float64 {
	half := dim / 2
	out := make([]float64, dim)
	for j := 0; j < half; j++ {
		f := math.Pow(10000, -float64(j)/float64(half))
		out[j], out[half+j] = math.Cos(t*f), math.Sin(t*f)
	}
	return out
}

func TestConditioningVector(t *testing.T) {
	fam, ok := infer.FamilyByName("sdxl")
	if !ok {
		t.Fatal("no sdxl family")
	}
	pooled := []float32{0.5, -1, 2}
	const w, h = 832, 1216
	v, err := conditioningVector(fam.Vector, [][]float32{pooled}, w, h, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 3+6*256 {
		t.Fatalf("%d values, want %d", len(v), 3+6*256)
	}
	if !slices.Equal(v[:3], pooled) {
		t.Errorf("the vector starts with %v, not the pooled embedding", v[:3])
	}
	// Original size (h, w), crop (0, 0), target size (h, w): sgm's order.
	var want []float64
	for _, x := range []float64{h, w, 0, 0, h, w} {
		want = append(want, refSinusoid(x, 256)...)
	}
	for i, x := range want {
		// float32 products of arguments up to 1216 rad: an ulp of the
		// argument is 1e-4, which the cos and sin carry.
		if d := math.Abs(float64(v[3+i]) - x); d > 2e-4 {
			t.Fatalf("value %d (number %d, component %d) = %g, want %g", 3+i, i/256, i%256, v[3+i], x)
		}
	}
	if _, err := conditioningVector(fam.Vector, nil, w, h, false); err == nil {
		t.Error("a vector without a pooled embedding was built")
	}
}

// refCLIPLayers runs a CLIP text transformer in float64 and returns the
// input of every layer and the last output (states[i] before layer i).
func refCLIPLayers(w map[string]inferutil.TestWeight, p string, ids []int32, layers, heads int, quick bool) [][]float64 {
	h := int(w[p+"embeddings.token_embedding.weight"].Shape[1])
	l := len(ids)
	x := make([]float64, l*h)
	tok, pos := w[p+"embeddings.token_embedding.weight"].Data, w[p+"embeddings.position_embedding.weight"].Data
	for i, id := range ids {
		for j := 0; j < h; j++ {
			x[i*h+j] = float64(tok[int(id)*h+j]) + float64(pos[i*h+j])
		}
	}
	linear := func(in []float64, name string, rows int) []float64 {
		wt, b := w[name+".weight"], w[name+".bias"]
		out := int(wt.Shape[0])
		y := make([]float64, rows*out)
		for r := 0; r < rows; r++ {
			for o := 0; o < out; o++ {
				s := float64(b.Data[o])
				for k := 0; k < int(wt.Shape[1]); k++ {
					s += float64(wt.Data[o*int(wt.Shape[1])+k]) * in[r*int(wt.Shape[1])+k]
				}
				y[r*out+o] = s
			}
		}
		return y
	}
	ln := func(in []float64, name string) []float64 {
		out := make([]float64, len(in))
		g, b := w[name+".weight"].Data, w[name+".bias"].Data
		for r := 0; r < len(in)/h; r++ {
			row := in[r*h : (r+1)*h]
			var m, v float64
			for _, f := range row {
				m += f
			}
			m /= float64(h)
			for _, f := range row {
				v += (f - m) * (f - m)
			}
			v /= float64(h)
			for j, f := range row {
				out[r*h+j] = (f-m)/math.Sqrt(v+infer.LayerNormEps)*float64(g[j]) + float64(b[j])
			}
		}
		return out
	}
	states := [][]float64{slices.Clone(x)}
	for i := 0; i < layers; i++ {
		b := p + "encoder.layers." + string(rune('0'+i)) + "."
		n1 := ln(x, b+"layer_norm1")
		q := linear(n1, b+"self_attn.q_proj", l)
		k := linear(n1, b+"self_attn.k_proj", l)
		v := linear(n1, b+"self_attn.v_proj", l)
		q32, k32, v32 := toF32(q), toF32(k), toF32(v)
		a := inferutil.RefAttention(q32, k32, v32, h, l, l, heads, 1, true)
		o := linear(toF64(a), b+"self_attn.out_proj", l)
		for j := range x {
			x[j] += o[j]
		}
		f := linear(ln(x, b+"layer_norm2"), b+"mlp.fc1", l)
		for j, z := range f {
			if quick {
				f[j] = z / (1 + math.Exp(-1.702*z))
			} else {
				f[j] = inferutil.GELUTanh(z)
			}
		}
		o = linear(f, b+"mlp.fc2", l)
		for j := range x {
			x[j] += o[j]
		}
		states = append(states, slices.Clone(x))
	}
	return append(states, ln(x, p+"final_layer_norm"))
}

func toF32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

func toF64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// The CLIP graph with SDXL's settings (the penultimate layer without the
// final norm, the pooled output at the end-of-text token through
// text_projection) against the float64 reference.
func TestCLIPPenultimateAndPooled(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	r := rand.New(rand.NewPCG(21, 22))
	const h, ff, vocab, pos, layers, heads, proj = 32, 64, 20, 8, 3, 2, 24
	p := clipGPrefix
	w := map[string]inferutil.TestWeight{
		p + "embeddings.token_embedding.weight":    {Shape: []int64{vocab, h}, Typ: formats.F32, Data: inferutil.Randn(r, vocab*h, 1)},
		p + "embeddings.position_embedding.weight": {Shape: []int64{pos, h}, Typ: formats.F32, Data: inferutil.Randn(r, pos*h, 0.1)},
		p + "text_projection":                      {Shape: []int64{proj, h}, Typ: formats.F32, Data: inferutil.Randn(r, proj*h, 0.3)},
	}
	norm := func(n string) {
		w[n+".weight"] = inferutil.TestWeight{Shape: []int64{h}, Typ: formats.F32, Data: inferutil.Randn(r, h, 1)}
		w[n+".bias"] = inferutil.TestWeight{Shape: []int64{h}, Typ: formats.F32, Data: inferutil.Randn(r, h, 0.1)}
	}
	lin := func(n string, out, in int) {
		w[n+".weight"] = inferutil.TestWeight{Shape: []int64{int64(out), int64(in)}, Typ: formats.F32, Data: inferutil.Randn(r, out*in, 0.2)}
		w[n+".bias"] = inferutil.TestWeight{Shape: []int64{int64(out)}, Typ: formats.F32, Data: inferutil.Randn(r, out, 0.1)}
	}
	for i := 0; i < layers; i++ {
		b := p + "encoder.layers." + string(rune('0'+i)) + "."
		norm(b + "layer_norm1")
		norm(b + "layer_norm2")
		for _, n := range []string{"q_proj", "k_proj", "v_proj", "out_proj"} {
			lin(b+"self_attn."+n, h, h)
		}
		lin(b+"mlp.fc1", ff, h)
		lin(b+"mlp.fc2", h, ff)
	}
	norm(p + "final_layer_norm")
	ws := inferutil.MakeWeights(t, be, w)
	ids := []int32{0, 5, 7, 19, 3, 0, 0}
	const at = 4
	cfg := clip.CLIPConfig{Prefix: p, Hidden: h, FF: ff, Layers: layers, Vocab: vocab, Positions: pos, Heads: heads, Skip: 2, Projection: proj}

	ctx, _ := native.NewContext(8192, 8192)
	defer ctx.Free()
	it, _ := ctx.NewTensor(formats.I32, int64(len(ids)))
	it.SetInput()
	g := &infer.Builder{Ctx: ctx, Weights: ws}
	var hid, pooled native.Tensor
	var err error
	func() {
		defer native.Recover(&err)
		hid, pooled = clip.CLIP(g, &cfg, it, at)
		hid = ctx.Cont(hid).SetOutput()
	}()
	if err != nil {
		t.Fatal(err)
	}
	gr := ctx.NewGraph(8192)
	for _, o := range g.Outputs {
		gr.Expand(o)
	}
	gr.Expand(hid)
	a := be.NewAllocator()
	defer a.Free()
	if err := a.Alloc(gr); err != nil {
		t.Fatal(err)
	}
	it.SetI32(ids)
	if err := be.Compute(gr); err != nil {
		t.Fatal(err)
	}
	gotH, err := hid.F32()
	if err != nil {
		t.Fatal(err)
	}
	gotP, err := pooled.F32()
	if err != nil {
		t.Fatal(err)
	}

	states := refCLIPLayers(w, p, ids, layers, heads, false)
	// ggml computes GELU through an f16 table: about 1e-4 per layer.
	if e := inferutil.MaxRelErr(t, gotH, toF32(states[layers-1])); e > 1e-3 {
		t.Errorf("penultimate hidden states: relative error %g", e)
	}
	final := states[layers+1]
	pw := w[p+"text_projection"].Data
	wantP := make([]float32, proj)
	for o := 0; o < proj; o++ {
		var s float64
		for k := 0; k < h; k++ {
			s += float64(pw[o*h+k]) * final[at*h+k]
		}
		wantP[o] = float32(s)
	}
	if e := inferutil.MaxRelErr(t, gotP, wantP); e > 1e-3 {
		t.Errorf("pooled output: relative error %g", e)
	}
}

// An OpenCLIP text_projection (LDM name, [width, embed], used as x @ P) is
// held transposed into the Linear layout; a Hugging Face one
// (text_projection.weight) as stored; StoredLayout keeps both as stored.
func TestTextProjectionLayout(t *testing.T) {
	const rows, cols = 3, 2
	vals := []float32{1, 2, 3, 4, 5, 6} // [3, 2] row-major
	f := inferutil.Encode(t, formats.F32, cols, vals)
	for _, c := range []struct {
		name      string
		stored    bool
		transpose bool
	}{
		{"conditioner.embedders.1.model.text_projection", false, true},
		{"conditioner.embedders.1.model.text_projection", true, false},
		{"te.1.text_projection.weight", false, false},
	} {
		m := &inferutil.MemModel{}
		m.Add(c.name, formats.F32, []int64{rows, cols}, f)
		src, err := infer.NewSource(family.InputByFlag(family.FlagModel), m)
		if err != nil {
			t.Fatal(err)
		}
		specs, err := infer.SelectFrom([]*infer.OpenSource{src}, nil, infer.LoadOptions{StoredLayout: c.stored})
		if err != nil {
			t.Fatal(err)
		}
		if len(specs) != 1 {
			t.Fatalf("%s: %d weights", c.name, len(specs))
		}
		s := specs[0]
		b, err := s.Read(&tensor.Scratch{})
		if err != nil {
			t.Fatal(err)
		}
		got := inferutil.Decode(t, formats.F32, b, rows*cols)
		want, shape := vals, []int64{rows, cols}
		if c.transpose {
			want, shape = []float32{1, 3, 5, 2, 4, 6}, []int64{cols, rows}
		}
		if !slices.Equal(got, want) || !slices.Equal(s.Shape, shape) {
			t.Errorf("%s (stored %v): %s %v %v, want %v %v", c.name, c.stored, s.Name, s.Shape, got, shape, want)
		}
	}
}

const tinySDXL = "../../../testdata/tiny-sdxl.gguf"

func TestTinySDXL(t *testing.T) {
	m := inferutil.LoadTiny(t, tinySDXL)
	cfg := m.Config
	if m.Family.Name() != "sdxl" || unetOf(cfg).ADMChannels != 64+6*256 || unetOf(cfg).ContextDim != 128 || !unetOf(cfg).LinearProj ||
		!slices.Equal(unetOf(cfg).TransformerDepth, []int{0, 1, 1}) || len(clip.CLIPEncoders(cfg)) != 2 {
		t.Fatalf("config %+v %+v", unetOf(cfg), clip.CLIPEncoders(cfg))
	}
	l, g := clip.CLIPEncoders(cfg)[0], clip.CLIPEncoders(cfg)[1]
	if l.Component != "clip_l" || !l.QuickGELU || l.FinalNorm || l.Skip != 2 || l.PadID != -1 || l.FusedQKV ||
		g.Component != "clip_g" || g.QuickGELU || g.FinalNorm || g.Skip != 2 || g.PadID != 0 || !g.FusedQKV || g.Projection != 64 {
		t.Errorf("text encoders %+v", clip.CLIPEncoders(cfg))
	}
	if v := cfg.VAE; v.ScaleFactor != 0.13025 || v.ConvScale != 1.0/32 {
		t.Errorf("VAE %+v", v)
	}
	// The context is CLIP-L's 64 then bigG's 64 per token; the vector
	// starts with the pooled bigG output; the size embeddings follow the
	// image size.
	c, err := m.Encode("a cat", 128, 128)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tokens != 77 || c.Dim != 128 || len(c.Context) != 77*128 || len(c.Vector) != unetOf(cfg).ADMChannels {
		t.Fatalf("conditioning %d x %d, vector %d", c.Tokens, c.Dim, len(c.Vector))
	}
	c2, err := m.Encode("a cat", 256, 128)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Context, c2.Context) || !slices.Equal(c.Vector[:64], c2.Vector[:64]) || slices.Equal(c.Vector[64:], c2.Vector[64:]) {
		t.Error("the image size should change only the size embeddings")
	}
	// An empty negative prompt is a zero context with a computed vector (sd-cli's SDXL rule).
	z, err := m.Cond.Encode("", 128, 128, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range z.Context {
		if v != 0 {
			t.Fatal("zeroed context has a non-zero value")
		}
	}
	if slices.Equal(z.Vector, make([]float32, len(z.Vector))) {
		t.Error("the zeroed conditioning lost its vector")
	}
	req := infer.Request{Prompt: "a (red:1.2) cat", Width: 64, Height: 64, Steps: 2, CFGScale: 5, Seed: 3, CaptureBlocks: true}
	a, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Latent, b.Latent) || !slices.Equal(a.Pixels, b.Pixels) {
		t.Error("SDXL generation is not deterministic")
	}
	if len(a.Blocks) == 0 || a.Blocks[len(a.Blocks)-1].Name != "output_blocks.5" {
		t.Errorf("%d blocks captured", len(a.Blocks))
	}
	req.Negative = "blurry"
	n, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(n.Latent, a.Latent) {
		t.Error("a negative prompt changed nothing")
	}
}

// splitTinySDXL writes tiny-sdxl.gguf's parts as standalone component
// files in the layouts people download: a ComfyUI-style UNet with bare
// names (GGUF), Hugging Face CLIP-L and CLIP-G files (safetensors, CLIP-G
// with its text_projection.weight in the Linear layout, the transpose of
// the checkpoint's OpenCLIP one, and the tokenizer in CLIP-L's metadata)
// and a bare VAE (safetensors).
func splitTinySDXL(t *testing.T, dir string) infer.Components {
	t.Helper()
	src, err := formats.Open(tinySDXL)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	type part struct {
		path   string
		ts     []formats.Tensor
		data   [][]byte
		gguf   bool
		strMD  map[string]string
		ggufMD formats.Metadata
	}
	parts := map[string]*part{
		"unet":   {path: dir + "/unet.gguf", gguf: true},
		"clip_l": {path: dir + "/clip_l.safetensors"},
		"clip_g": {path: dir + "/clip_g.safetensors"},
		"vae":    {path: dir + "/vae.safetensors"},
	}
	for _, kv := range src.Metadata() {
		switch v := kv.Value.(type) {
		case string:
			if kv.Key == "sdtool.tokenizer.clip.merges" {
				parts["clip_l"].strMD = map[string]string{kv.Key: v}
			}
		case uint32:
			parts["unet"].ggufMD = append(parts["unet"].ggufMD, kv)
		}
	}
	for _, ts := range src.Tensors() {
		data, err := formats.ReadTensor(src, &ts)
		if err != nil {
			t.Fatal(err)
		}
		var p *part
		name := ts.Name
		switch {
		case infer.HasPrefix(name, infer.DmPrefix):
			p, name = parts["unet"], name[len(infer.DmPrefix):]
		case infer.HasPrefix(name, infer.VAEPfx):
			p, name = parts["vae"], name[len(infer.VAEPfx):]
		case infer.HasPrefix(name, "conditioner.embedders.0.transformer."):
			p, name = parts["clip_l"], name[len("conditioner.embedders.0.transformer."):]
		case infer.HasPrefix(name, "conditioner.embedders.1.model."):
			p = parts["clip_g"]
			name = infer.ConvertName(name, names.SDXL)[len("cond_stage_model.1.transformer."):]
			if name == "text_model.text_projection" {
				name = "text_projection.weight" // CLIPTextModelWithProjection's name
				r, c := int(ts.Shape[0]), int(ts.Shape[1])
				tr := make([]byte, len(data))
				for i := 0; i < r; i++ {
					for j := 0; j < c; j++ {
						copy(tr[2*(j*r+i):2*(j*r+i)+2], data[2*(i*c+j):2*(i*c+j)+2])
					}
				}
				data = tr
			}
		default:
			t.Fatalf("unexpected tensor %s", name)
		}
		d := ts
		d.Name = name
		p.ts = append(p.ts, d)
		p.data = append(p.data, data)
	}
	for _, p := range parts {
		f, err := os.Create(p.path)
		if err != nil {
			t.Fatal(err)
		}
		var w formats.TensorWriter
		if p.gguf {
			w, err = gguf.NewWriter(f, p.ts, p.ggufMD, nil)
		} else {
			w, err = safetensors.NewWriter(f, p.ts, p.strMD, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.data {
			if _, err := w.Write(d); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return infer.Components{"diffusion-model": parts["unet"].path, "clip_l": parts["clip_l"].path, "clip_g": parts["clip_g"].path, "vae": parts["vae"].path}
}

// The same weights as separate component files (sd-cli's flags, other
// names and formats, CLIP-G in the Hugging Face layout) give the same image
// bit for bit, as long as the VAE's conv scale is the same (sd-cli applies
// it only to a checkpoint's own VAE); a standalone component replaces the
// checkpoint's part.
func TestSDXLComponents(t *testing.T) {
	longtest.Skip(t, "SDXL from component files")
	single := inferutil.LoadTiny(t, tinySDXL)
	comps := splitTinySDXL(t, t.TempDir())
	m, err := infer.Load(comps, infer.LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Family.Name() != "sdxl" || m.Config.VAE.ConvScale != 0 {
		t.Fatalf("family %s, conv scale %g", m.Family.Name(), m.Config.VAE.ConvScale)
	}
	single.Config.VAE.ConvScale = 0
	req := infer.Request{Prompt: "a red cat", Negative: "blurry", Width: 64, Height: 64, Steps: 2, CFGScale: 4, Seed: 11}
	a, err := single.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Latent, b.Latent) || !slices.Equal(a.Pixels, b.Pixels) {
		t.Error("the component files give another image than the single file")
	}
	// The checkpoint with a standalone CLIP-G and VAE: those parts come from the files.
	mixed, err := infer.Load(infer.Components{"model": tinySDXL, "clip_g": comps["clip_g"], "vae": comps["vae"]}, infer.LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer mixed.Close()
	from := map[string]string{}
	for _, s := range mixed.Specs {
		from[s.Name] = s.Component
	}
	if from[clipGPrefix+"text_projection"] != "clip_g" || from[infer.VAEPfx+"decoder.conv_in.weight"] != "vae" || from[CLIPPrefix+"final_layer_norm.weight"] != "model" {
		t.Errorf("text_projection from %q, decoder.conv_in from %q, CLIP-L from %q", from[clipGPrefix+"text_projection"], from[infer.VAEPfx+"decoder.conv_in.weight"], from[CLIPPrefix+"final_layer_norm.weight"])
	}
	c, err := mixed.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Latent, c.Latent) {
		t.Error("the mixed components give another latent")
	}
}

// A diffusers SDXL folder's names (formats/diffusers prefixes them as sd.cpp's
// loader does: unet., vae., te., te.1.) load under the names the SDXL parts
// read; text_encoder_2's "te.1." goes to cond_stage_model.1 (sd.cpp's own
// "te." rule would send it to cond_stage_model.transformer.1).
func TestSDXLDiffusersNames(t *testing.T) {
	f := inferutil.Encode(t, formats.F32, 4, inferutil.Ramp(4, 1))
	m := &inferutil.MemModel{}
	for _, n := range []string{
		"unet.conv_in.weight", "unet.down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight",
		"unet.mid_block.resnets.1.conv1.weight", "unet.add_embedding.linear_1.weight", "unet.add_embedding.linear_2.weight",
		"te.text_model.embeddings.token_embedding.weight", "te.1.text_model.embeddings.token_embedding.weight",
		"te.1.text_model.encoder.layers.3.self_attn.q_proj.weight", "te.1.text_projection.weight",
		"vae.decoder.conv_in.weight", "vae.decoder.up_blocks.0.resnets.0.conv1.weight",
	} {
		if strings.HasSuffix(n, "attn2.to_k.weight") {
			// The cross-attention context width (2048) is what tells the
			// family table an SDXL UNet.
			m.Add(n, formats.F32, []int64{1, 2048}, inferutil.Encode(t, formats.F32, 2048, inferutil.Ramp(2048, 1)))
			continue
		}
		m.Add(n, formats.F32, []int64{1, 4}, f)
	}
	specs := inferutil.PlanByName(t, m, nil)
	for _, want := range []string{
		infer.DmPrefix + "input_blocks.0.0.weight", infer.DmPrefix + "input_blocks.4.1.transformer_blocks.0.attn2.to_k.weight",
		infer.DmPrefix + "middle_block.2.in_layers.2.weight", infer.DmPrefix + "label_emb.0.0.weight", infer.DmPrefix + "label_emb.0.2.weight",
		CLIPPrefix + "embeddings.token_embedding.weight", clipGPrefix + "embeddings.token_embedding.weight",
		clipGPrefix + "encoder.layers.3.self_attn.q_proj.weight", clipGPrefix + "text_projection",
		infer.VAEPfx + "decoder.conv_in.weight", infer.VAEPfx + "decoder.up.3.block.0.conv1.weight",
	} {
		s, ok := specs[want]
		if !ok {
			t.Errorf("no %s among %v", want, inferutil.Keys(specs))
			continue
		}
		if s.Transpose {
			t.Errorf("%s (Hugging Face layout) is transposed", want)
		}
	}
}

// --imatrix-out on SDXL: an entry for every linear weight of the UNet and
// both text encoders that a generation runs, named as in the model file:
// bigG's in_proj and its text_projection included, CLIP-L's last layer
// left out (SDXL conditions on the penultimate one, as sd-cli, which
// collects the same entries).
func TestImatrixSDXL(t *testing.T) {
	longtest.Skip(t, "SDXL's importance matrix")
	m := inferutil.LoadTiny(t, tinySDXL)
	s, _ := inferutil.CollectTiny(t, m, infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 5, Seed: 1, Method: infer.Euler}, "")
	mx := s.Matrix("")
	var want []string
	for _, sp := range m.Specs {
		n := sp.Src.Name
		if len(sp.Shape) != 2 || infer.HasPrefix(n, infer.VAEPfx) || strings.Contains(n, "embedding") ||
			infer.HasPrefix(n, "conditioner.embedders.0.transformer.text_model.encoder.layers.1.") {
			continue
		}
		want = append(want, n)
	}
	slices.Sort(want)
	if got := mx.Names(); !slices.Equal(got, want) {
		t.Fatalf("entries:\n got %q\nwant %q", got, want)
	}
	for _, n := range []string{"conditioner.embedders.1.model.text_projection", "conditioner.embedders.1.model.transformer.resblocks.1.attn.in_proj_weight",
		"model.diffusion_model.label_emb.0.0.weight"} {
		if _, ok := mx.Lookup(n); !ok {
			t.Errorf("no entry %s", n)
		}
	}
}

// The SDXL refiner (bigG alone, the aesthetic score in the vector) runs on
// the same parts: its vector embeds score 6 for the prompt and 2.5 for the
// negative, and img2img from a base image is deterministic.
func TestSDXLRefiner(t *testing.T) {
	longtest.Skip(t, "the SDXL refiner's render")
	c := synth.TinySDXL
	c.Refiner = true
	path := filepath.Join(t.TempDir(), "refiner.gguf")
	if err := c.Write(path); err != nil {
		t.Fatal(err)
	}
	m := inferutil.LoadTiny(t, path)
	if m.Family.Name() != "sdxl-refiner" || len(clip.CLIPEncoders(m.Config)) != 1 || clip.CLIPEncoders(m.Config)[0].Prefix != CLIPPrefix ||
		unetOf(m.Config).ContextDim != 64 || unetOf(m.Config).ADMChannels != 64+5*256 {
		t.Fatalf("family %s, config %+v %+v", m.Family.Name(), unetOf(m.Config), clip.CLIPEncoders(m.Config))
	}
	pos, err := m.Cond.Encode("a cat", 64, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	neg, err := m.Cond.(infer.NegativeConditioner).EncodeNegative("a cat", 64, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	n := len(pos.Vector)
	if !slices.Equal(pos.Vector[:n-256], neg.Vector[:n-256]) || !slices.Equal(pos.Context, neg.Context) {
		t.Error("the negative pass changed more than the score")
	}
	for i, want := range [][]float64{refSinusoid(6, 256), refSinusoid(2.5, 256)} {
		got := [][]float32{pos.Vector, neg.Vector}[i][n-256:]
		for j := range want {
			if math.Abs(float64(got[j])-want[j]) > 1e-6 {
				t.Fatalf("score embedding %d[%d] = %g, want %g", i, j, got[j], want[j])
			}
		}
	}
	base := inferutil.LoadTiny(t, tinySDXL)
	r, err := base.Generate(infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 2, CFGScale: 5, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	req := infer.Request{Prompt: "a cat", Negative: "blurry", Width: 64, Height: 64, Steps: 4, CFGScale: 5, Seed: 4, Init: r.Pixels, Strength: 0.3}
	a, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Pixels, b.Pixels) || slices.Equal(a.Pixels, r.Pixels) {
		t.Error("refiner img2img is not deterministic, or changed nothing")
	}
}

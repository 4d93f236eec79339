//go:build cgo

package t5

import (
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
	"github.com/sdtool/sdtool/text"
)

// loadT5Component loads a T5 encoder file the way Load reads a --t5xxl
// file (sd-cli's load prefix, names.Convert, the held types), detects its
// configuration and returns a Model holding it, with the T5 tokenizer
// loadT5Tokenizer finds.
func loadT5Component(t testing.TB, path string) *infer.Model {
	t.Helper()
	ct := family.InputByFlag("t5xxl")
	fm, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	src, err := infer.NewSource(ct, fm)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := infer.SelectFrom([]*infer.OpenSource{src}, nil, infer.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sh := map[string][]int64{}
	for _, s := range specs {
		sh[s.Name] = s.Shape
	}
	cfg, err := DetectT5(sh, fm.Metadata(), T5Prefix)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tok, err := loadT5Tokenizer("", []*infer.OpenSource{src})
	if err != nil {
		t.Fatal(err)
	}
	be, err := native.NewCPUBackend(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Free)
	ws, err := infer.LoadWeights(be, path, specs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ws.Free)
	alloc := be.NewAllocator()
	t.Cleanup(alloc.Free)
	return &infer.Model{Path: path, Config: &infer.ModelConfig{Encoders: []infer.EncoderConfig{cfg}}, Tokenizers: map[string]any{"t5": tok}, Backend: be, Weights: ws, Alloc: alloc, Specs: specs}
}

// TestT5NamingsLoadAlike writes the tiny T5 in the three namings people
// publish (HF names, the same under text_encoders.t5xxl.transformer., and
// llama.cpp's GGUF names) and checks that each loads as a --t5xxl file
// with the same configuration and gives the same hidden states.
func TestT5NamingsLoadAlike(t *testing.T) {
	dir := t.TempDir()
	var want []float32
	ids := []int32{5, 1, 0, 0, 7, 19, 2, 0, 1}
	for _, umt5 := range []bool{false, true} {
		want = nil
		for _, c := range []struct{ naming, ext string }{
			{synth.T5HF, ".safetensors"}, {synth.T5Comfy, ".safetensors"}, {synth.T5GGUF, ".gguf"}, {synth.T5HF, ".gguf"},
		} {
			t5NamingLoads(t, dir, c.naming, c.ext, umt5, ids, &want)
		}
	}
}

// t5NamingLoads is one case of TestT5NamingsLoadAlike (umt5: a bias table
// in every layer): the file loads with the expected configuration and
// gives the hidden states *want holds (or sets them).
func t5NamingLoads(t *testing.T, dir, naming, ext string, umt5 bool, ids []int32, want *[]float32) {
	name := naming + ext
	if umt5 {
		name = "umt5-" + name
	}
	t.Run(name, func(t *testing.T) {
		p := synth.TinyT5
		p.Naming, p.LayerBias = naming, umt5
		path := filepath.Join(dir, name)
		if err := p.Write(path); err != nil {
			t.Fatal(err)
		}
		m := loadT5Component(t, path)
		tok, _ := p.Tokenizer()
		wantCfg := T5Config{Component: "t5xxl", Prefix: T5Prefix, Embedding: T5Prefix + "shared.weight",
			Vocab: tok.VocabSize(), Hidden: p.Hidden, FF: p.FF, Layers: p.Layers, Heads: p.Heads, HeadDim: p.HeadDim,
			Buckets: p.Buckets, MaxDistance: 128, LayerBias: umt5}
		if *T5(m.Config) != wantCfg {
			t.Fatalf("config %+v, want %+v", *T5(m.Config), wantCfg)
		}
		if (T5Tokenizer(m) != nil) != (ext == ".gguf") {
			t.Errorf("tokenizer found: %v, want %v (GGUF carries it)", T5Tokenizer(m) != nil, ext == ".gguf")
		}
		got, err := EncodeT5(m, ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		if *want == nil {
			*want = got
			return
		}
		if !slices.Equal(got, *want) {
			t.Errorf("hidden states differ from the HF-named file's (relative error %g)", inferutil.MaxRelErr(t, got, *want))
		}
	})
}

// TestT5ContextLayout checks the prompt path sd-cli's Flux conditioner
// takes: 256 tokens per chunk, </s> after the pieces, <pad> after that,
// the hidden states of each chunk as EncodeT5 gives them, prompt weights
// applied with the mean kept, and long prompts split across chunks.
func TestT5ContextLayout(t *testing.T) {
	p := synth.TinyT5
	p.Naming = synth.T5GGUF
	path := filepath.Join(t.TempDir(), "t5.gguf")
	if err := p.Write(path); err != nil {
		t.Fatal(err)
	}
	m := loadT5Component(t, path)
	tok := T5Tokenizer(m)
	if tok == nil {
		t.Fatal("no tokenizer in the GGUF file")
	}
	const n = text.FluxT5Length
	ctx, tokens, err := T5Context(m, tok, "a red cat", n)
	if err != nil {
		t.Fatal(err)
	}
	if tokens != n || len(ctx) != n*p.Hidden {
		t.Fatalf("%d tokens, %d values; want %d, %d", tokens, len(ctx), n, n*p.Hidden)
	}
	ids := tok.EncodeChunked("a red cat", n)
	if want := []int32{tok.Tokenize("a")[0], tok.Tokenize("red")[0], tok.Tokenize("cat")[0], 1, 0}; !slices.Equal(ids[:5], want) {
		t.Fatalf("ids start %v, want %v", ids[:5], want)
	}
	direct, err := EncodeT5(m, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ctx, direct) {
		t.Error("t5Context differs from EncodeT5 on the same ids")
	}
	// The rest uses chunks of 16 to stay fast.
	const s = 16
	if ctx, _, err = T5Context(m, tok, "a red cat", s); err != nil {
		t.Fatal(err)
	}
	// A weighted word: its row is scaled, and the whole chunk rescaled to the unweighted mean.
	wctx, _, err := T5Context(m, tok, "a (red:1.5) cat", s)
	if err != nil {
		t.Fatal(err)
	}
	mean := func(v []float32) float64 {
		var s float64
		for _, x := range v {
			s += float64(x)
		}
		return s / float64(len(v))
	}
	if d := mean(wctx) - mean(ctx); d > 1e-6 || d < -1e-6 {
		t.Errorf("weighted mean %g, unweighted %g", mean(wctx), mean(ctx))
	}
	h := p.Hidden
	ratio := float64(wctx[h]) / float64(ctx[h]) / (float64(wctx[0]) / float64(ctx[0]))
	if ratio < 1.49 || ratio > 1.51 {
		t.Errorf("weighted row over unweighted row: %g times the others', want 1.5", ratio)
	}
	// The empty prompt: </s> then padding (what sd-cli's stubbed tokenizer
	// also gives), with or without a tokenizer.
	e1, _, err := T5Context(m, tok, "", s)
	if err != nil {
		t.Fatal(err)
	}
	e2, _, err := T5Context(m, nil, "", s)
	if err != nil {
		t.Fatal(err)
	}
	pad := make([]int32, s)
	pad[0] = 1
	e3, err := EncodeT5(m, pad, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e1, e3) || !slices.Equal(e2, e3) {
		t.Error("the empty prompt is not </s> and padding")
	}
	if _, _, err := T5Context(m, nil, "a cat", s); err == nil {
		t.Error("a prompt without a tokenizer: no error")
	}
	// 20 words: two chunks of 16 (15 pieces and </s>, then 5 and </s> and padding).
	long := strings.Repeat("cat ", 20)
	lctx, tokens, err := T5Context(m, tok, long, s)
	if err != nil {
		t.Fatal(err)
	}
	if tokens != 2*s {
		t.Fatalf("a 20-token prompt gives %d tokens, want %d", tokens, 2*s)
	}
	cat := tok.Tokenize("cat")[0]
	second := []int32{cat, cat, cat, cat, cat, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	h2, err := EncodeT5(m, second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lctx[s*h:], h2) {
		t.Error("the second chunk is not the last 5 pieces, </s> and padding")
	}
}

// TestT5Imatrix checks imatrix collection over the T5 encoder: one entry
// per linear weight (seven per block), named as in the file (llama.cpp's
// names for a GGUF T5), with the rows and calls of one encoding, and the
// first attention's Σx² equal to the normed token embeddings' recomputed
// in Go from the file's values.
func TestT5Imatrix(t *testing.T) {
	p := synth.TinyT5
	p.Naming = synth.T5GGUF
	path := filepath.Join(t.TempDir(), "t5.gguf")
	if err := p.Write(path); err != nil {
		t.Fatal(err)
	}
	m := loadT5Component(t, path)
	s := infer.NewImatrixStats()
	m.SetImatrix(s)
	ids := []int32{5, 1, 0, 0, 7, 19, 2}
	if _, err := EncodeT5(m, ids, nil); err != nil {
		t.Fatal(err)
	}
	mx := s.Matrix("test")
	var want []string
	for i := 0; i < p.Layers; i++ {
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_o", "ffn_gate", "ffn_up", "ffn_down"} {
			want = append(want, fmt.Sprintf("enc.blk.%d.%s.weight", i, n))
		}
	}
	slices.Sort(want)
	if got := mx.Names(); !slices.Equal(got, want) {
		t.Fatalf("entries:\n got %q\nwant %q", got, want)
	}
	for _, e := range mx.Entries {
		in := p.Hidden
		if strings.Contains(e.Name, "ffn_down") {
			in = p.FF
		}
		if len(e.Sum2) != in || e.NCall != 1 || e.Counts[0] != float32(len(ids)) {
			t.Errorf("%s: %d values, %d calls, %v rows; want %d, 1, %d", e.Name, len(e.Sum2), e.NCall, e.Counts[0], in, len(ids))
		}
	}
	values := func(name string) []float32 {
		for _, sp := range m.Specs {
			if sp.Src.Name == name {
				raw, err := sp.Read(&tensor.Scratch{})
				if err != nil {
					t.Fatal(err)
				}
				dec, err := quant.Decoder(sp.Type)
				if err != nil {
					t.Fatal(err)
				}
				n, _ := formats.Elements(sp.Shape)
				f := make([]float32, n)
				dec.Dequantize(f, raw)
				return f
			}
		}
		t.Fatalf("no tensor %s", name)
		return nil
	}
	emb, norm := values("token_embd.weight"), values("enc.blk.0.attn_norm.weight")
	h := p.Hidden
	ref := make([]float64, h)
	for _, id := range ids {
		row := emb[int(id)*h : int(id+1)*h]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		r := 1 / math.Sqrt(ss/float64(h)+1e-6)
		for j, v := range row {
			x := float64(v) * r * float64(norm[j])
			ref[j] += x * x
		}
	}
	e, _ := mx.Lookup("enc.blk.0.attn_q.weight")
	for j := range ref {
		if d := math.Abs(float64(e.Sum2[j]) - ref[j]); d > 1e-4*ref[j]+1e-6 {
			t.Fatalf("column %d: Σx² %v, Go recomputation %v", j, e.Sum2[j], ref[j])
		}
	}
}

// TestT5RealTokenizer loads T5's own spiece.model the way --t5-tokenizer
// does (LoadOptions.Tokenizers["t5"]) beside an encoder with T5-XXL's 32128
// embedding rows, and checks that a prompt reaches the encoder as the ids
// transformers.js publishes for it, then </s> and padding to 256.
func TestT5RealTokenizer(t *testing.T) {
	dir := t.TempDir()
	gz, err := os.Open("../../../text/testdata/t5/spiece.model.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	spiece := filepath.Join(dir, "spiece.model")
	if err := os.WriteFile(spiece, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	p := synth.TinyT5
	p.Vocab = 32128
	path := filepath.Join(dir, "t5.safetensors")
	if err := p.Write(path); err != nil {
		t.Fatal(err)
	}
	m := loadT5Component(t, path)
	if T5Tokenizer(m) != nil {
		t.Fatal("a safetensors T5 carries no tokenizer")
	}
	tok, err := loadT5Tokenizer(spiece, nil)
	if err != nil {
		t.Fatal(err)
	}
	layout, weights, err := t5Layout(tok, "How are you doing?", text.FluxT5Length)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int32, text.FluxT5Length)
	copy(want, []int32{571, 33, 25, 692, 58, 1}) // published, </s> included; then <pad> 0
	if !slices.Equal(layout.IDs, want) {
		t.Fatalf("ids %v..., want %v...", layout.IDs[:8], want[:8])
	}
	for i, w := range weights {
		if w != 1 {
			t.Fatalf("weight %d is %g, want 1", i, w)
		}
	}
	ctx, _, err := T5Context(m, tok, "How are you doing?", text.FluxT5Length)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := EncodeT5(m, want, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ctx, direct) {
		t.Error("the prompt's context differs from the encoder's output on the published ids")
	}
}

// TestT5ContextMasked checks Chroma's variant: the mask marks the pieces
// and </s>, and masking the keys changes what the tokens see.
func TestT5ContextMasked(t *testing.T) {
	p := synth.TinyT5
	p.Naming = synth.T5GGUF
	path := filepath.Join(t.TempDir(), "t5.gguf")
	if err := p.Write(path); err != nil {
		t.Fatal(err)
	}
	m := loadT5Component(t, path)
	const n = 12
	plain, keep, err := T5ContextMasked(m, T5Tokenizer(m), "a red cat", n, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, true, true, false, false, false, false, false, false, false, false}
	if !slices.Equal(keep, want) {
		t.Fatalf("mask %v, want %v", keep, want)
	}
	masked, _, err := T5ContextMasked(m, T5Tokenizer(m), "a red cat", n, true)
	if err != nil {
		t.Fatal(err)
	}
	ids := T5Tokenizer(m).EncodeChunked("a red cat", n)
	direct, err := EncodeT5(m, ids, keep)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(masked, direct) {
		t.Error("the masked context is not EncodeT5 with the layout's mask")
	}
	if slices.Equal(masked[:p.Hidden], plain[:p.Hidden]) {
		t.Error("masking the padding did not change the first token's state")
	}
}

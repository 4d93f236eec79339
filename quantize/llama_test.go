package quantize

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/splitmix"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// comfyGemmaMap is ComfyUI-GGUF's GEMMA_SD_MAP (gemma_tenc branch,
// bf8cb71): LLAMA_SD_MAP with the Gemma norms renamed in place and two
// entries added, in Python dict order.
var comfyGemmaMap = func() [][2]string {
	m := slices.Clone(comfyTextMaps["llama"])
	for i, r := range m {
		if r[0] == "ffn_norm" {
			m[i][1] = "pre_feedforward_layernorm"
		}
	}
	return append(m, [2]string{"post_ffw_norm", "post_feedforward_layernorm"}, [2]string{"post_attention_norm", "post_attention_layernorm"})
}()

// comfyUnpermute is ComfyUI-GGUF's llama_permute (loader.py 795e451) for
// one q or k weight of rows x cols: x.reshape(h, rows/h/2, 2, cols)
// .swapaxes(1, 2).reshape(rows, cols), so that output row
// h*per + k*half + j is input row h*per + 2j + k.
func comfyUnpermute(x []float32, rows, cols int64, h int64) []float32 {
	per, half := rows/h, rows/h/2
	y := make([]float32, len(x))
	for hh := range h {
		for j := range half {
			for k := range int64(2) {
				src := (hh*per + 2*j + k) * cols
				dst := (hh*per + k*half + j) * cols
				copy(y[dst:dst+cols], x[src:src+cols])
			}
		}
	}
	return y
}

// bigTensor is the size from which writeSmallData leaves a tensor zero
// (the layouts' token embeddings, whose real vocabularies detection reads)
// and readAll reads its first row only.
const bigTensor = 1 << 20

// writeSmallData writes layout as safetensors F16 with distinct values in
// every tensor under bigTensor elements and zeros (a hole) in the larger
// ones, so that a round trip moves little data.
func writeSmallData(t *testing.T, path, layout string) {
	t.Helper()
	tensors, err := synth.Descriptors(synth.Spec{Arch: layout, DType: formats.F16})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range tensors {
		if strings.HasSuffix(x.Name, "q_proj.weight") {
			// Four rows for each of 32 heads, so that the permutation
			// moves q's rows too (two rows a head stay in place).
			tensors[i].Shape = []int64{128, x.Shape[1]}
			tensors[i].Size = 2 * 128 * x.Shape[1]
		}
	}
	writeHeaderOnly(t, path, tensors, nil)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err != nil {
		t.Fatal(err)
	}
	off := 8 + int64(binary.LittleEndian.Uint64(n[:]))
	enc, err := quant.Encoder(formats.F16)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range tensors {
		if e := x.Elements(); e < bigTensor {
			v := make([]float32, e)
			for j := range v {
				v[j] = float32(int64(splitmix.At(uint64(i), uint64(j))%2001)-1000) / 512
			}
			b := make([]byte, 2*e)
			enc.Quantize(b, v, nil)
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
		off += x.Size
	}
}

// readAll reads every tensor of the model at path as float32, with shapes
// (the first row only of one of bigTensor elements or more).
func readAll(t *testing.T, path string) (map[string][]float32, map[string][]int64) {
	t.Helper()
	m, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, err := tensor.NewView(m)
	if err != nil {
		t.Fatal(err)
	}
	vals, shapes := map[string][]float32{}, map[string][]int64{}
	var s tensor.Scratch
	for _, src := range v.Sources {
		n := src.Elements()
		if n >= bigTensor {
			n = src.Shape()[len(src.Shape())-1]
		}
		f := make([]float32, n)
		if err := src.Read(f, 0, &s); err != nil {
			t.Fatal(err)
		}
		vals[src.Name], shapes[src.Name] = f, src.Shape()
	}
	return vals, shapes
}

// TestLlamaTextEncoderRoundTrip: Mistral, Llama 3 and Gemma 3 text
// encoders written to GGUF with llama.cpp's names (q/k rows permuted for
// the llama architecture, norms +1 for Gemma), then read back as
// ComfyUI-GGUF's loader reads them (its renames, its reverse permutation
// with 32 heads and 8 KV heads; for Gemma, its gemma_tenc branch's renames
// and norm shift), give the input's tensors exactly. F16 inputs written as
// F32 keep every value exact through the shift.
func TestLlamaTextEncoderRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		layout, arch string
		names        [][2]string
		permute      bool
		shift        float32
	}{
		{"layout-mistral", "llama", comfyTextMaps["llama"], true, 0},
		{"layout-llama3", "llama", comfyTextMaps["llama"], true, 0},
		{"layout-gemma3", "gemma3", comfyGemmaMap, false, 1},
	} {
		in := filepath.Join(dir, c.layout+".safetensors")
		writeSmallData(t, in, c.layout)
		out := filepath.Join(dir, c.layout+".gguf")
		res, err := quantizeRun(t.Context(), &Options{Input: in, Output: out, Type: "F32"}, pipeline.Options{Threads: 2}, false)
		if err != nil {
			t.Fatalf("%s: %v", c.layout, err)
		}
		if got, _ := res.Header.Metadata.String("general.architecture"); got != c.arch {
			t.Errorf("%s: general.architecture %q, want %q", c.layout, got, c.arch)
		}
		want, wantShapes := readAll(t, in)
		got, gotShapes := readAll(t, out)
		back := map[string][]float32{}
		for name, v := range got {
			n := name
			for _, r := range c.names {
				n = strings.ReplaceAll(n, r[0], r[1])
			}
			if c.permute && (strings.HasSuffix(n, "q_proj.weight") || strings.HasSuffix(n, "k_proj.weight")) {
				h := int64(32)
				if strings.HasSuffix(n, "k_proj.weight") {
					h = 8
				}
				v = comfyUnpermute(v, gotShapes[name][0], gotShapes[name][1], h)
			}
			if c.shift != 0 && strings.HasSuffix(n, "norm.weight") {
				for i := range v {
					v[i] -= c.shift
				}
			}
			if _, dup := back[n]; dup {
				t.Errorf("%s: two tensors read back as %s", c.layout, n)
			}
			back[n] = v
			if !slices.Equal(gotShapes[name], wantShapes[n]) {
				t.Errorf("%s: %s (read back as %s) has shape %v, want %v", c.layout, name, n, gotShapes[name], wantShapes[n])
			}
		}
		if len(back) != len(want) {
			t.Errorf("%s: %d tensors read back, want %d", c.layout, len(back), len(want))
		}
		for name, w := range want {
			if !slices.Equal(back[name], w) {
				t.Errorf("%s: %s differs after the round trip", c.layout, name)
			}
		}
		// The permutation is not the identity on these shapes: without the
		// reverse, q differs.
		if c.permute {
			for _, p := range [][2]string{{"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"}, {"blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight"}} {
				if slices.Equal(got[p[0]], want[p[1]]) {
					t.Errorf("%s: %s was written unpermuted", c.layout, p[0])
				}
			}
		}
	}
}

// TestLlamaRowIsLlamaCppPermute: llamaRow is llama.cpp's converter
// permutation, w.reshape(h, 2, rows/h/2, cols).swapaxes(1, 2), computed
// here by its index arithmetic on a 2-head, 8-row example, and
// comfyUnpermute inverts it.
func TestLlamaRowIsLlamaCppPermute(t *testing.T) {
	const rows, heads = 8, 2
	// llama.cpp: out[h][j][k] = in[h][k][j] for k in {0,1}, j < rows/h/2.
	want := []int64{0, 2, 1, 3, 4, 6, 5, 7}
	in := make([]float32, rows)
	for r := range int64(rows) {
		in[r] = float32(r)
		if got := llamaRow(r, rows, heads); got != want[r] {
			t.Errorf("llamaRow(%d) = %d, want %d", r, got, want[r])
		}
	}
	perm := make([]float32, rows)
	for r := range int64(rows) {
		perm[r] = in[llamaRow(r, rows, heads)]
	}
	if back := comfyUnpermute(perm, rows, 1, heads); !slices.Equal(back, in) {
		t.Errorf("comfyUnpermute(permuted) = %v, want %v", back, in)
	}
}

// TestLlamaTargets: --target comfyui accepts Llama 3, refuses Mistral
// without the Tekken tokenizer metadata ComfyUI-GGUF rebuilds from, and
// refuses Gemma 3 (no such text architecture in ComfyUI-GGUF); sd.cpp
// can load all three.
func TestLlamaTargets(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		layout, want string
		ok           bool
	}{
		{"layout-llama3", "", true},
		{"layout-mistral", "Tekken tokenizer", false},
		{"layout-gemma3", "no gemma3 architecture", false},
	} {
		in := layoutFile(t, dir, c.layout)
		res, err := quantizeRun(t.Context(), &Options{Input: in, Output: in + ".gguf", Type: "Q8_0", Targets: []string{TargetComfyUI, TargetSDCpp}}, pipeline.Options{}, true)
		if err != nil {
			t.Fatalf("%s: %v", c.layout, err)
		}
		var comfy, sd Consumer
		for _, x := range res.Report.Consumers {
			switch x.Name {
			case TargetComfyUI:
				comfy = x
			case TargetSDCpp:
				sd = x
			}
		}
		if comfy.OK != c.ok || !strings.Contains(strings.Join(comfy.Problems, "; "), c.want) {
			t.Errorf("%s: comfyui ok %v %v, want ok %v and %q", c.layout, comfy.OK, comfy.Problems, c.ok, c.want)
		}
		if !sd.OK {
			t.Errorf("%s: sdcpp %v", c.layout, sd.Problems)
		}
		if !res.LlamaNames || family.ByID(res.Arch) == nil {
			t.Errorf("%s: llama.cpp names %v (arch %s)", c.layout, res.LlamaNames, res.Arch)
		}
	}
}

// TestGemmaNamesAsSDCppReadsThem: sd.cpp 97d2990 reads a Gemma 3 GGUF
// through its llm name map (package names follows it) into the names its
// GEMMA3_12B block declares (llm.hpp): post_attention_norm after
// attention, post_attention_layernorm before the feed-forward,
// post_ffw_norm after it. The names sdtool writes land on those.
func TestGemmaNamesAsSDCppReadsThem(t *testing.T) {
	in := layoutFile(t, t.TempDir(), "layout-gemma3")
	res, err := quantizeRun(t.Context(), &Options{Input: in, Output: in + ".gguf", Type: "Q8_0"}, pipeline.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	sdcpp := strings.NewReplacer("input_layernorm", "input_layernorm", "post_attention_layernorm", "post_attention_norm",
		"pre_feedforward_layernorm", "post_attention_layernorm", "post_feedforward_layernorm", "post_ffw_norm")
	for _, o := range res.Outputs {
		const p = "text_encoders.llm."
		if got, want := names.Convert(p+o.Name, names.Unknown), p+sdcpp.Replace(o.Source.Name); got != want {
			t.Errorf("%s (from %s): sd.cpp reads %s, its Gemma 3 block wants %s", o.Name, o.Source.Name, got, want)
		}
	}
}

// gpt2Decoder is the inverse of GPT-2's bytes_to_unicode, as ComfyUI-GGUF
// builds it to read a byte-level vocabulary back: printable Latin-1 bytes
// stand for themselves, the other 68 for U+0100 upwards in byte order.
func gpt2Decoder() map[rune]byte {
	d := map[rune]byte{}
	extra := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			d[rune(b)] = byte(b)
		} else {
			d[rune(256+extra)] = byte(b)
			extra++
		}
	}
	return d
}

// TestMistralTokenizerForComfyUI: with --tokenizer, a Mistral text
// encoder's GGUF carries a gpt2-model vocabulary that --target comfyui
// accepts, and rebuilding ComfyUI-GGUF's Tekken data from it
// (gguf_tekken_tokenizer_loader in loader.py 795e451: control tokens are
// the special tokens by rank, the others decoded to bytes in order) gives
// the tokenizer's special tokens and token bytes.
func TestMistralTokenizerForComfyUI(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "tokenizer.json")
	const js = `{"added_tokens":[{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true},{"id":2,"content":"[INST]","special":true}],
"model":{"type":"BPE","vocab":{"<unk>":0,"<s>":1,"[INST]":2,"h":3,"i":4,"Ġ":5,"hi":6,"Ġhi":7,"Ã©":8},"merges":["h i","Ġ hi"]}}`
	if err := os.WriteFile(tok, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	in := layoutFile(t, dir, "layout-mistral")
	res, err := quantizeRun(t.Context(), &Options{Input: in, Output: in + ".gguf", Type: "Q8_0", Tokenizer: tok, Targets: []string{TargetComfyUI}}, pipeline.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Report.Consumers[0]; !c.OK {
		t.Errorf("comfyui: %v", c.Problems)
	}
	md := res.Header.Metadata
	if m, _ := md.String("tokenizer.ggml.model"); m != "gpt2" {
		t.Fatalf("tokenizer.ggml.model %q", m)
	}
	tv, _ := md.Get("tokenizer.ggml.tokens")
	yv, _ := md.Get("tokenizer.ggml.token_type")
	tokens, types := tv.Value.(formats.Array).Values.([]string), yv.Value.(formats.Array).Values.([]int32)
	dec := gpt2Decoder()
	var specials []string
	var vocab [][]byte
	for i, s := range tokens {
		if types[i] == 3 {
			specials = append(specials, s)
			continue
		}
		var b []byte
		for _, r := range s {
			c, ok := dec[r]
			if !ok {
				t.Fatalf("token %d (%q): %q is not in GPT-2's byte alphabet", i, s, r)
			}
			b = append(b, c)
		}
		vocab = append(vocab, b)
	}
	if want := []string{"<unk>", "<s>", "[INST]"}; !slices.Equal(specials, want) {
		t.Errorf("special tokens %q, want %q", specials, want)
	}
	want := [][]byte{[]byte("h"), []byte("i"), []byte(" "), []byte("hi"), []byte(" hi"), []byte("é")}
	if !slices.EqualFunc(vocab, want, slices.Equal) {
		t.Errorf("vocabulary bytes %q, want %q", vocab, want)
	}
	// A safetensors output has no arrays to hold it.
	if _, err := quantizeRun(t.Context(), &Options{Input: in, Output: in + ".out.safetensors", Type: "int8", Tokenizer: tok}, pipeline.Options{}, true); err == nil || !strings.Contains(err.Error(), "Tokenizer applies") {
		t.Errorf("safetensors output with --tokenizer: %v", err)
	}
}

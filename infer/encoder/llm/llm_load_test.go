//go:build cgo

package llm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/text"
)

// loadLLMComponent loads an LLM file the way Load reads a --llm file
// (sd-cli's load prefix, names.Convert, the held types), detects its
// configuration and returns a Model holding it with the tokenizer
// loadLLMKindTokenizer finds (opt's, else the file's metadata).
func loadLLMComponent(t testing.TB, path string, opt infer.LoadOptions) *infer.Model {
	t.Helper()
	fm, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	src, err := infer.NewSource(family.InputByFlag("llm"), fm)
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
	cfg, err := DetectLLM(sh, fm.Metadata(), LLMPrefix)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tok, err := loadLLMKindTokenizer(opt, []*infer.OpenSource{src}, []infer.EncoderConfig{cfg}, path)
	if err != nil {
		t.Fatal(err)
	}
	be, err := native.NewCPUBackend(opt.Threads)
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
	return &infer.Model{Path: path, Config: &infer.ModelConfig{Encoders: []infer.EncoderConfig{cfg}}, Tokenizers: map[string]any{"llm": tok}, Backend: be, Weights: ws, Alloc: alloc, Specs: specs}
}

// tinyQwenVocab is a byte-level vocabulary with Qwen's split: the 256 byte
// symbols, a few merges and Qwen's chat control tokens.
func tinyQwenVocab() *text.ByteBPEVocab {
	v := &text.ByteBPEVocab{Pre: text.PreQwen2}
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r = rune(256 + len(v.Tokens) - printableBelow(b))
		}
		v.Tokens = append(v.Tokens, string(r))
	}
	for _, m := range [][2]string{{"c", "a"}, {"ca", "t"}, {"Ġ", "cat"}} {
		v.Merges = append(v.Merges, m[0]+" "+m[1])
		v.Tokens = append(v.Tokens, m[0]+m[1])
	}
	v.Types = make([]int32, len(v.Tokens))
	for _, s := range []string{"<|im_start|>", "<|im_end|>"} {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, text.TokenControl)
	}
	for i := range v.Types {
		if v.Types[i] == 0 {
			v.Types[i] = text.TokenNormal
		}
	}
	return v
}

// printableBelow counts the bytes below b that GPT-2's alphabet keeps.
func printableBelow(b int) int {
	n := 0
	for x := 0; x < b; x++ {
		if x >= '!' && x <= '~' || x >= 0xA1 && x <= 0xAC || x >= 0xAE {
			n++
		}
	}
	return n
}

// TestLLMLoadsEveryNaming writes one tiny Qwen3 and one tiny Qwen2.5-VL
// under Hugging Face's names (safetensors, as ComfyUI's files) and
// llama.cpp's (GGUF with its tokenizer embedded): each pair loads to the
// same configuration and the same hidden states, and the GGUF's
// tokenizer encodes the template.
func TestLLMLoadsEveryNaming(t *testing.T) {
	dir := t.TempDir()
	for _, base := range []synth.LLM{
		{QKNorm: true, Hidden: 64, FF: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 300, Seed: 1, Type: formats.F32, Quant: formats.F16},
		// Without q_norm only the GGUF's key_length tells the head width: the
		// safetensors file holds 128, sd.cpp's assumption.
		{Hidden: 64, FF: 96, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 128, Vocab: 300, Seed: 2, Type: formats.F32, Quant: formats.F16},
	} {
		hf, gg := base, base
		gg.GGUFNames, gg.Tokenizer = true, tinyQwenVocab()
		hfPath, ggPath := filepath.Join(dir, "hf.safetensors"), filepath.Join(dir, "llama.gguf")
		if err := hf.Write(hfPath); err != nil {
			t.Fatal(err)
		}
		if err := gg.Write(ggPath); err != nil {
			t.Fatal(err)
		}
		a := loadLLMComponent(t, hfPath, infer.LoadOptions{Threads: 1})
		b := loadLLMComponent(t, ggPath, infer.LoadOptions{Threads: 1})
		ca, cb := LLM(a.Config), LLM(b.Config)
		if *ca != *cb || ca.Heads != base.Heads || ca.KVHeads != base.KVHeads || ca.QKNorm != base.QKNorm || ca.Layers != 2 {
			t.Fatalf("configurations %+v and %+v, want %+v", ca, cb, base)
		}
		if Tokenizer(a) != nil || Tokenizer(b) == nil {
			t.Fatalf("tokenizers: safetensors %v, GGUF %v (want none and one)", Tokenizer(a), Tokenizer(b))
		}
		ids := []int32{256, 3, 200, 17, 259, 1}
		ha, err := EncodeLLM(a, ids, 0)
		if err != nil {
			t.Fatal(err)
		}
		hb, err := EncodeLLM(b, ids, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ha, hb) {
			t.Errorf("%s: hidden states differ between the namings", ca.Arch.Name)
		}
		p := LLMPrompt{Before: "<|im_start|>user\n", After: "<|im_end|>", Drop: 1}
		h, n, err := EncodeLLMPrompt(b, "a cat", p)
		if err != nil {
			t.Fatal(err)
		}
		// <|im_start|> u s e r \n | a Ġcat | <|im_end|>, less the first.
		if n != 8 || len(h) != n*cb.Hidden {
			t.Errorf("%d tokens (%d values), want 8", n, len(h))
		}
		if _, _, err := EncodeLLMPrompt(a, "a cat", p); err == nil {
			t.Error("a prompt encoded without a tokenizer")
		}
		// A tokenizer.json given as the option replaces the missing one.
		a2 := loadLLMComponent(t, hfPath, infer.LoadOptions{Threads: 1, Tokenizers: map[string]string{"llm": writeTokenizerJSON(t, dir, gg.Tokenizer)}})
		h2, n2, err := EncodeLLMPrompt(a2, "a cat", p)
		if err != nil || n2 != n || !slices.Equal(h2, h) {
			t.Errorf("with --llm-tokenizer: %d tokens, %v; want the GGUF's %d and the same states", n2, err, n)
		}
	}
}

// writeTokenizerJSON writes v as a Hugging Face tokenizer.json with Qwen's
// split pattern and returns its path.
func writeTokenizerJSON(t *testing.T, dir string, v *text.ByteBPEVocab) string {
	t.Helper()
	vocab := map[string]int{}
	var added []map[string]any
	for i, s := range v.Tokens {
		if v.Types[i] == text.TokenControl {
			added = append(added, map[string]any{"id": i, "content": s, "special": true})
			continue
		}
		vocab[s] = i
	}
	doc := map[string]any{
		"added_tokens":  added,
		"pre_tokenizer": map[string]any{"type": "Split", "pattern": map[string]any{"Regex": text.PreQwen2Regex}},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": v.Merges},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLLMPromptTemplates checks the templates' dropped-token counts with
// Qwen's real tokenizer: Qwen-Image drops exactly its system prefix (34
// tokens, the pipeline's prompt_template_encode_start_idx), Z-Image keeps
// everything from <|im_start|>.
func TestLLMPromptTemplates(t *testing.T) {
	path := os.Getenv(qwenTokenizerEnv)
	if path == "" {
		t.Skipf("%s is not set (Qwen's tokenizer.json)", qwenTokenizerEnv)
	}
	tok, err := text.LoadByteBPETokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tok.Encode(QwenImagePrompt.Before)); n != QwenImagePrompt.Drop {
		t.Errorf("Qwen-Image's template before the prompt is %d tokens, Drop %d", n, QwenImagePrompt.Drop)
	}
	ids, ws, err := PromptLayout(tok, "a (red:1.5) fox", ZImagePrompt)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := tok.TokenID("<|im_start|>")
	if ZImagePrompt.Drop != 0 || ids[0] != start || len(ids) != len(ws) {
		t.Fatalf("Z-Image layout %v", ids)
	}
	var weighted int
	for _, w := range ws {
		if w == 1.5 {
			weighted++
		}
	}
	if weighted != 1 { // " red"
		t.Errorf("%d tokens weigh 1.5, want 1 (weights %v)", weighted, ws)
	}
}

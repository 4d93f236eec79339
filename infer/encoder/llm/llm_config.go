package llm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/text"
)

// LLMPrefix is where a decoder-only LLM text encoder's weights live among
// the internal names: sd-cli's prefix for --llm files (text_encoders.llm.)
// and Hugging Face's model., under which its names follow
// (embed_tokens.weight, layers.N.self_attn.q_proj.weight, norm.weight).
// ComfyUI's qwen_3_4b.safetensors and qwen_2.5_vl_7b.safetensors use those
// names, and llama.cpp's GGUF names (token_embd.weight, blk.N.attn_q.weight)
// load there too: names.Convert renames them. A family's TextEncoder.Prefix
// is this, not the file's whole part, so that a vision tower
// (text_encoders.llm.visual.) and lm_head stay out of memory.
const LLMPrefix = "text_encoders.llm.model."

// Metadata keys for what an LLM's shapes do not tell.
const (
	// MetaLLMHeadDim is the attention's head width (default: q_norm's
	// width when the model has one, else llama.cpp's
	// <arch>.attention.key_length, else 128 as sd.cpp assumes).
	MetaLLMHeadDim = "sdtool.llm.head_dim"
	// MetaLLMArch names the architecture (LLMArchs) when the shapes
	// cannot tell it.
	MetaLLMArch = "sdtool.llm.arch"
)

// LLMArch is what an LLM architecture fixes that its shapes do not show,
// as sd.cpp's LLMRunner runs it (src/model/te/llm.hpp).
type LLMArch struct {
	// Name is the architecture ("qwen3", "qwen2.5-vl", "mistral").
	Name string
	// RopeMode pairs the rotary channels (native.RopeNeox for Qwen,
	// native.RopeNormal for Mistral, as sd.cpp rotates it whatever the
	// file) and RopeTheta is the rotary base. Qwen2.5-VL's multimodal
	// rotary embedding gives a text token the same position in its three
	// sections, so for text it is the ordinary NeoX rotation.
	RopeMode  int
	RopeTheta float32
	// Eps is the RMSNorm epsilon.
	Eps float32
}

// LLMArchs are the architectures the "llm" encoder kind runs.
var LLMArchs = map[string]LLMArch{
	"qwen3":      {Name: "qwen3", RopeMode: native.RopeNeox, RopeTheta: 1e6, Eps: 1e-6},
	"qwen2.5-vl": {Name: "qwen2.5-vl", RopeMode: native.RopeNeox, RopeTheta: 1e6, Eps: 1e-6},
	// Mistral Small 3.x (Flux.2 dev's text encoder): no q_norm/k_norm, no biases.
	"mistral": {Name: "mistral", RopeMode: native.RopeNormal, RopeTheta: 1e9, Eps: 1e-5},
}

// LLMConfig is a decoder-only LLM text encoder's configuration (Qwen3 for
// Z-Image, Qwen2.5-VL's text model for Qwen-Image), detected from shapes.
type LLMConfig struct {
	// Component is the input flag of its standalone file ("llm").
	Component string
	// Prefix is where its weights live among the internal names (LLMPrefix).
	Prefix string
	// Arch is the architecture: Qwen3 has q_norm and k_norm, Qwen2.5-VL
	// biases on q, k and v.
	Arch LLMArch
	// Vocab, Hidden, FF (the MLP's intermediate width) and Layers are the sizes.
	Vocab, Hidden, FF, Layers int
	// Heads and KVHeads are the query and key/value head counts (grouped
	// query attention: KVHeads divides Heads), HeadDim each head's width.
	Heads, KVHeads, HeadDim int
	// QKNorm and QKVBias report q_norm/k_norm and the q, k, v biases.
	QKNorm, QKVBias bool
	// FinalNorm reports the final norm (norm.weight), applied after the last layer.
	FinalNorm bool
}

// Input is the input flag of the encoder's standalone file.
func (c *LLMConfig) Input() string { return c.Component }

// Width is the width of the encoder's hidden states.
func (c *LLMConfig) Width() int { return c.Hidden }

// layer returns the internal name prefix of decoder layer i.
func (c *LLMConfig) layer(i int) string { return fmt.Sprintf("%slayers.%d.", c.Prefix, i) }

// llmDefaultHeadDim is the head width sd.cpp assumes for every Qwen and Mistral LLM.
const llmDefaultHeadDim = 128

// DetectLLM reads the configuration of the LLM whose weights sit under
// prefix in sh (internal names, PyTorch shapes), with md's overrides.
func DetectLLM(sh map[string][]int64, md formats.Metadata, prefix string) (*LLMConfig, error) {
	s := infer.Shapes(sh)
	if !s.Has(prefix+"embed_tokens.weight") && s.Has(prefix+"model.embed_tokens.weight") {
		// A family that names the file's whole part (text_encoders.llm.)
		// gets the model under it; LLMPrefix also leaves a vision tower out.
		prefix += "model."
	}
	c := &LLMConfig{Component: "llm", Prefix: prefix}
	emb := prefix + "embed_tokens.weight"
	var err error
	if c.Vocab, err = s.Dim(emb, 0); err != nil {
		return nil, err
	}
	if c.Hidden, _ = s.Dim(emb, 1); len(s[emb]) != 2 || c.Vocab <= 0 || c.Hidden <= 0 {
		return nil, fmt.Errorf("tensor %q has shape %v, want [vocab, width] with both above 0", emb, s[emb])
	}
	for s.Has(c.layer(c.Layers) + "self_attn.q_proj.weight") {
		c.Layers++
	}
	if c.Layers == 0 {
		return nil, fmt.Errorf("no layers under %slayers (no layers.0.self_attn.q_proj.weight)", prefix)
	}
	if err := llmNoGap(s, prefix, c.Layers); err != nil {
		return nil, err
	}
	l0 := c.layer(0)
	qOut, err := s.Dim(l0+"self_attn.q_proj.weight", 0)
	if err != nil {
		return nil, err
	}
	kvOut, err := s.Dim(l0+"self_attn.k_proj.weight", 0)
	if err != nil {
		return nil, err
	}
	if c.FF, err = s.Dim(l0+"mlp.gate_proj.weight", 0); err != nil {
		return nil, err
	}
	c.QKNorm = s.Has(l0 + "self_attn.q_norm.weight")
	c.QKVBias = s.Has(l0 + "self_attn.q_proj.bias")
	c.FinalNorm = s.Has(prefix + "norm.weight")
	if c.HeadDim, err = llmHeadDim(s, md, l0, c.QKNorm); err != nil {
		return nil, err
	}
	if qOut%c.HeadDim != 0 || kvOut%c.HeadDim != 0 || kvOut == 0 || (qOut/c.HeadDim)%(kvOut/c.HeadDim) != 0 {
		return nil, fmt.Errorf("q_proj's %d and k_proj's %d outputs do not split into heads of %d with the key heads dividing the query heads", qOut, kvOut, c.HeadDim)
	}
	c.Heads, c.KVHeads = qOut/c.HeadDim, kvOut/c.HeadDim
	if c.Arch, err = llmArch(md, c); err != nil {
		return nil, err
	}
	return c, c.checkLayers(s)
}

// llmNoGap refuses a tensor in a layer past the first missing one, which
// would otherwise be left out silently.
func llmNoGap(s infer.Shapes, prefix string, layers int) error {
	for name := range s {
		rest, ok := strings.CutPrefix(name, prefix+"layers.")
		if !ok {
			continue
		}
		if dot := strings.IndexByte(rest, '.'); dot > 0 {
			if n, err := strconv.Atoi(rest[:dot]); err == nil && n >= layers {
				return fmt.Errorf("tensor %q is in layer %d, but layer %d has no self_attn.q_proj.weight", name, n, layers)
			}
		}
	}
	return nil
}

// llmHeadDim is q_norm's width, else the metadata's head width, else 128.
func llmHeadDim(s infer.Shapes, md formats.Metadata, l0 string, qkNorm bool) (int, error) {
	if qkNorm {
		d, err := s.Dim(l0+"self_attn.q_norm.weight", 0)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("tensor %q has shape %v, want [head width]", l0+"self_attn.q_norm.weight", s[l0+"self_attn.q_norm.weight"])
		}
		return d, nil
	}
	keys := []string{MetaLLMHeadDim}
	if a, ok := md.String("general.architecture"); ok {
		keys = append(keys, a+".attention.key_length")
	}
	for _, k := range keys {
		if d, ok, err := infer.MetaInt(md, k); err != nil {
			return 0, err
		} else if ok {
			return d, nil
		}
	}
	return llmDefaultHeadDim, nil
}

// llmArch picks the architecture: the metadata's when set, else Qwen3 for
// a model with q_norm and k_norm, Qwen2.5-VL for one with q, k, v biases,
// Mistral for one with neither (the only such LLM sd.cpp runs as a text
// encoder; it picks the architecture from the DiT, sdtool from the shapes).
func llmArch(md formats.Metadata, c *LLMConfig) (LLMArch, error) {
	if name, ok := md.String(MetaLLMArch); ok {
		a, ok := LLMArchs[name]
		if !ok {
			return LLMArch{}, fmt.Errorf("metadata %s = %q is not an architecture generate runs (qwen3, qwen2.5-vl, mistral)", MetaLLMArch, name)
		}
		return a, nil
	}
	switch {
	case c.QKNorm:
		return LLMArchs["qwen3"], nil
	case c.QKVBias:
		return LLMArchs["qwen2.5-vl"], nil
	}
	return LLMArchs["mistral"], nil
}

// checkLayers checks that every layer has the tensors the graph reads with
// the shapes layer 0's imply, so a truncated or mixed file fails here
// with the tensor's name.
func (c *LLMConfig) checkLayers(s infer.Shapes) error {
	h, q, kv, ff, d := int64(c.Hidden), int64(c.Heads*c.HeadDim), int64(c.KVHeads*c.HeadDim), int64(c.FF), int64(c.HeadDim)
	want := map[string][]int64{
		"input_layernorm.weight":          {h},
		"post_attention_layernorm.weight": {h},
		"self_attn.q_proj.weight":         {q, h},
		"self_attn.k_proj.weight":         {kv, h},
		"self_attn.v_proj.weight":         {kv, h},
		"self_attn.o_proj.weight":         {h, q},
		"mlp.gate_proj.weight":            {ff, h},
		"mlp.up_proj.weight":              {ff, h},
		"mlp.down_proj.weight":            {h, ff},
	}
	if c.QKNorm {
		want["self_attn.q_norm.weight"], want["self_attn.k_norm.weight"] = []int64{d}, []int64{d}
	}
	if c.QKVBias {
		want["self_attn.q_proj.bias"], want["self_attn.k_proj.bias"], want["self_attn.v_proj.bias"] = []int64{q}, []int64{kv}, []int64{kv}
	}
	names := slices.Sorted(maps.Keys(want)) // the same tensor named first on every run
	for i := 0; i < c.Layers; i++ {
		for _, n := range names {
			if err := s.Want(c.layer(i)+n, want[n]); err != nil {
				return err
			}
		}
	}
	if c.FinalNorm {
		return s.Want(c.Prefix+"norm.weight", []int64{h})
	}
	return nil
}

func init() {
	infer.RegisterEncoderKind("llm", infer.EncoderKind{
		Detect: func(s infer.Shapes, md formats.Metadata, e *infer.TextEncoder) (infer.EncoderConfig, error) {
			c, err := DetectLLM(s, md, e.Prefix)
			if err != nil {
				return nil, err
			}
			c.Component = e.Component
			return c, nil
		},
		Tokenizer: loadLLMKindTokenizer,
	})
}

// LLM returns the model's LLM text encoder, nil when it has none.
func LLM(c *infer.ModelConfig) *LLMConfig {
	for _, e := range c.Encoders {
		if l, ok := e.(*LLMConfig); ok {
			return l
		}
	}
	return nil
}

// Tokenizer returns the model's LLM tokenizer (nil when none was found).
func Tokenizer(m *infer.Model) *text.ByteBPETokenizer {
	t, _ := m.Tokenizers["llm"].(*text.ByteBPETokenizer)
	return t
}

// loadLLMKindTokenizer takes opt.Tokenizers["llm"] when given (a
// tokenizer.json, vocab.json with merges.txt, or a folder), else the
// byte-level BPE vocabulary embedded in the metadata of the first component
// file that has one (the --llm file first, as llama.cpp's GGUFs carry
// theirs); nil without an error when there is none. Every id must have a
// row in the embedding.
func loadLLMKindTokenizer(opt infer.LoadOptions, srcs []*infer.OpenSource, encs []infer.EncoderConfig, main string) (any, error) {
	var tok *text.ByteBPETokenizer
	if file := opt.Tokenizers["llm"]; file != "" {
		t, err := text.LoadByteBPETokenizer(file)
		if err != nil {
			return nil, err
		}
		tok = t
	}
	for _, flag := range []string{"llm", "model", "diffusion-model"} {
		for _, s := range srcs {
			if tok != nil || s.Comp.Flag != flag {
				continue
			}
			t, err := text.ByteBPEFromMetadata(s.M.Path(), s.M.Metadata())
			if errors.Is(err, text.ErrNoByteBPETokenizer) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%w (a tokenizer given as an option replaces it)", err)
			}
			tok = t
		}
	}
	if tok == nil {
		return nil, nil
	}
	for _, e := range encs {
		if c := e.(*LLMConfig); tok.VocabSize() > c.Vocab {
			return nil, fmt.Errorf("%s: the LLM tokenizer has %d tokens, the LLM's embedding %d rows", main, tok.VocabSize(), c.Vocab)
		}
	}
	return tok, nil
}

package llm

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// llmShapes are the shapes of an LLM under LLMPrefix: Qwen3-4B's widths
// (or Qwen2.5-VL-7B's with bias) and the given depth, plus a vision tower
// and lm_head beside it.
func llmShapes(qwen3 bool, layers int) map[string][]int64 {
	h, q, kv, ff, vocab := int64(2560), int64(4096), int64(1024), int64(9728), int64(151936)
	if !qwen3 {
		h, q, kv, ff, vocab = 3584, 3584, 512, 18944, 152064
	}
	s := map[string][]int64{
		LLMPrefix + "embed_tokens.weight":                   {vocab, h},
		LLMPrefix + "norm.weight":                           {h},
		"text_encoders.llm.visual.blocks.0.attn.qkv.weight": {3840, 1280},
		"text_encoders.llm.visual.merger.mlp.0.weight":      {5120, 5120},
		"text_encoders.llm.lm_head.weight":                  {vocab, h},
	}
	for i := 0; i < layers; i++ {
		p := LLMPrefix + "layers." + strconv.Itoa(i) + "."
		s[p+"input_layernorm.weight"] = []int64{h}
		s[p+"post_attention_layernorm.weight"] = []int64{h}
		s[p+"self_attn.q_proj.weight"] = []int64{q, h}
		s[p+"self_attn.k_proj.weight"] = []int64{kv, h}
		s[p+"self_attn.v_proj.weight"] = []int64{kv, h}
		s[p+"self_attn.o_proj.weight"] = []int64{h, q}
		s[p+"mlp.gate_proj.weight"] = []int64{ff, h}
		s[p+"mlp.up_proj.weight"] = []int64{ff, h}
		s[p+"mlp.down_proj.weight"] = []int64{h, ff}
		if qwen3 {
			s[p+"self_attn.q_norm.weight"] = []int64{128}
			s[p+"self_attn.k_norm.weight"] = []int64{128}
		} else {
			s[p+"self_attn.q_proj.bias"] = []int64{q}
			s[p+"self_attn.k_proj.bias"] = []int64{kv}
			s[p+"self_attn.v_proj.bias"] = []int64{kv}
		}
	}
	return s
}

func TestDetectLLM(t *testing.T) {
	c, err := DetectLLM(llmShapes(true, 36), nil, LLMPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch.Name != "qwen3" || c.Hidden != 2560 || c.Layers != 36 || c.Heads != 32 || c.KVHeads != 8 || c.HeadDim != 128 || c.FF != 9728 || c.Vocab != 151936 || !c.QKNorm || c.QKVBias || !c.FinalNorm {
		t.Errorf("Qwen3-4B: %+v", c)
	}
	// The file's whole part as the prefix finds the model under it.
	if c, err := DetectLLM(llmShapes(true, 2), nil, "text_encoders.llm."); err != nil || c.Prefix != LLMPrefix || c.Layers != 2 {
		t.Errorf("prefix text_encoders.llm.: %+v, %v", c, err)
	}
	c, err = DetectLLM(llmShapes(false, 28), nil, LLMPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch.Name != "qwen2.5-vl" || c.Hidden != 3584 || c.Layers != 28 || c.Heads != 28 || c.KVHeads != 4 || c.HeadDim != 128 || c.QKNorm || !c.QKVBias {
		t.Errorf("Qwen2.5-VL-7B: %+v", c)
	}
	// Neither q_norm nor biases is Mistral (Flux.2 dev's Mistral Small 3.x:
	// 40 layers 5120 wide, 32 query and 8 key heads of 128).
	mistral := llmShapes(true, 3)
	for k := range mistral {
		if strings.Contains(k, "self_attn.q_norm") || strings.Contains(k, "self_attn.k_norm") {
			delete(mistral, k)
		}
	}
	if c, err = DetectLLM(mistral, nil, LLMPrefix); err != nil || c.Arch.Name != "mistral" || c.Arch.RopeTheta != 1e9 || c.Arch.Eps != 1e-5 || c.HeadDim != 128 || c.Heads != 32 || c.KVHeads != 8 {
		t.Errorf("Mistral: %+v, %v", c, err)
	}
	// llama.cpp's key_length decides the head width where no q_norm tells it.
	md := formats.Metadata{{Key: "general.architecture", Type: formats.TypeString, Value: "qwen2vl"},
		{Key: "qwen2vl.attention.key_length", Type: formats.TypeUint32, Value: uint32(64)}}
	if c, err = DetectLLM(llmShapes(false, 2), md, LLMPrefix); err != nil || c.Heads != 56 || c.KVHeads != 8 {
		t.Errorf("key_length 64: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		name string
		edit func(s map[string][]int64)
		md   formats.Metadata
		want string
	}{
		{"no embedding", func(s map[string][]int64) { delete(s, LLMPrefix+"embed_tokens.weight") }, nil, "embed_tokens"},
		{"no layers", func(s map[string][]int64) {
			for k := range s {
				if strings.Contains(k, "layers.") {
					delete(s, k)
				}
			}
		}, nil, "no layers"},
		{"gap", func(s map[string][]int64) { delete(s, LLMPrefix+"layers.1.self_attn.q_proj.weight") }, nil, "layer 1 has no"},
		{"truncated layer", func(s map[string][]int64) { delete(s, LLMPrefix+"layers.2.mlp.up_proj.weight") }, nil, "layers.2.mlp.up_proj.weight"},
		{"wrong shape", func(s map[string][]int64) {
			s[LLMPrefix+"layers.1.self_attn.v_proj.weight"] = []int64{1024, 2000}
		}, nil, "v_proj.weight"},
		{"heads", func(s map[string][]int64) {
			s[LLMPrefix+"layers.0.self_attn.k_proj.weight"] = []int64{1000, 2560}
		}, nil, "do not split"},
		{"unknown arch", func(s map[string][]int64) {}, formats.Metadata{{Key: MetaLLMArch, Type: formats.TypeString, Value: "gpt-oss"}}, "gpt-oss"},
	} {
		s := llmShapes(true, 3)
		tc.edit(s)
		if _, err := DetectLLM(s, tc.md, LLMPrefix); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestLLMOutputs(t *testing.T) {
	cfg := &LLMConfig{Layers: 36, FinalNorm: true}
	for _, c := range []struct {
		layers []int
		outs   []int
		norm   bool
	}{
		{[]int{0}, nil, true}, {[]int{35}, []int{35}, false}, {[]int{36}, []int{36}, false}, {[]int{37}, nil, true},
		{[]int{1}, []int{1}, false}, {[]int{-1}, nil, true}, {nil, nil, true}, {[]int{38}, nil, true},
		{[]int{27, 9, 18}, []int{9, 18, 27}, false}, {[]int{37, 9, 9}, []int{9}, true}, {[]int{9, 40}, []int{9}, false},
	} {
		if outs, norm := LLMOutputs(cfg, c.layers); !slices.Equal(outs, c.outs) || norm != c.norm {
			t.Errorf("layers %v: %v, norm %v; want %v, %v", c.layers, outs, norm, c.outs, c.norm)
		}
	}
}

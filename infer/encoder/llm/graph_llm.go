package llm

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/text"
)

// The decoder-only LLM text encoder as stable-diffusion.cpp (97d2990) runs
// it for Z-Image (Qwen3) and Qwen-Image (Qwen2.5-VL's text model): pre-norm
// layers of RMSNorm, grouped-query self-attention with rotary embeddings
// and a causal mask (Qwen3 RMS-normalizes each query and key head first),
// and a SwiGLU MLP; the hidden states a family reads are those after a
// given number of layers, or after all of them and the final norm.

// LLMPrompt is how a family wraps its prompt for the LLM and which hidden
// states it keeps (sd.cpp's LLMEmbedder::get_learned_condition): the
// prompt's template, the leading tokens dropped after encoding and the
// layer read. Families set it as data beside their conditioner.
type LLMPrompt struct {
	// Before and After are the template's text around the user's prompt
	// (Z-Image: "<|im_start|>user\n" and "<|im_end|>\n<|im_start|>assistant\n").
	// Each is tokenized on its own, as are the prompt's attention runs.
	Before, After string
	// Drop is the number of leading tokens whose hidden states are
	// dropped (sd.cpp's prompt_template_encode_start_idx: 34 for
	// Qwen-Image's system prompt, 0 for Z-Image).
	Drop int
	// Layer selects the hidden states: those after Layer decoder layers
	// when 1 <= Layer <= the model's layer count (Z-Image: 35 of Qwen3-4B's
	// 36, the penultimate), otherwise those after every layer and the
	// final norm (Qwen-Image), as sd.cpp's out_layers does.
	Layer int
	// Layers, when set, replaces Layer with several layers whose hidden
	// states are concatenated along the width in ascending order (Flux.2
	// klein: 9, 18, 27); the model's layer count plus one names the final
	// norm's output, and layers past that are ignored, as in sd.cpp.
	Layers []int
	// MinTokens pads the tokens with PadToken to at least this many
	// (Flux.2 klein: 512); no query attends to the padding, whose hidden
	// states stay in the result.
	MinTokens int
	// PadToken is the padding token's text (Qwen: "<|endoftext|>").
	PadToken string
	// BOS, when set, is the text of a token put before the template
	// (Mistral: "<s>", sd.cpp's add_bos_token), weighing 1.
	BOS string
	// MinHidden pads the hidden states with rows of zeros to at least
	// this many, after the tokens' weights are applied (Flux.2 dev: 512,
	// sd.cpp's hidden_states_min_length); no token is added.
	MinHidden int
}

// ZImagePrompt and QwenImagePrompt are sd.cpp's text-to-image templates of
// Z-Image and Qwen-Image.
var (
	ZImagePrompt = LLMPrompt{
		Before: "<|im_start|>user\n",
		After:  "<|im_end|>\n<|im_start|>assistant\n",
		Layer:  35,
	}
	QwenImagePrompt = LLMPrompt{
		Before: "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n",
		After:  "<|im_end|>\n<|im_start|>assistant\n",
		Drop:   34,
	}
)

// llm builds the decoder on token ids [L] at positions pos [L] (I32) and
// returns the hidden states [W, L] that layers select (llmOutputs), W the
// LLM's width times their number. mask, when valid, is an additive key
// mask [L] (F32: 0 keeps a key, -Inf hides it) on top of the causal one.
func llm(g *infer.Builder, cfg *LLMConfig, ids, pos, mask native.Tensor, layers []int) native.Tensor {
	x := g.Ctx.GetRows(g.Weight(cfg.Prefix+"embed_tokens.weight"), ids)
	outs, norm := LLMOutputs(cfg, layers)
	last := cfg.Layers
	if !norm {
		last = outs[len(outs)-1]
	}
	var res native.Tensor
	keep := func(t native.Tensor) {
		if !res.Valid() {
			res = t
			return
		}
		res = g.Ctx.Concat(res, t, 0)
	}
	for i, next := 0, 0; i < last; i++ {
		x = llmLayer(g, cfg, x, pos, mask, i)
		if next < len(outs) && outs[next] == i+1 {
			keep(x)
			next++
		}
	}
	if norm {
		if cfg.FinalNorm {
			x = llmNorm(g, x, cfg.Prefix+"norm.weight", cfg.Arch.Eps)
		}
		keep(x)
	}
	return res
}

// LLMOutputs resolves out layers as sd.cpp does: the ascending layers in
// 1..Layers whose outputs are read, and whether the final norm's output
// follows (layer Layers+1, or no layer selected at all).
func LLMOutputs(cfg *LLMConfig, layers []int) (outs []int, norm bool) {
	sorted := slices.Clone(layers)
	slices.Sort(sorted)
	for _, l := range slices.Compact(sorted) {
		switch {
		case l >= 1 && l <= cfg.Layers:
			outs = append(outs, l)
		case l == cfg.Layers+1:
			norm = true
		}
	}
	return outs, norm || len(outs) == 0
}

// promptLayers is the out layers p selects.
func (p LLMPrompt) promptLayers() []int {
	if len(p.Layers) > 0 {
		return p.Layers
	}
	return []int{p.Layer}
}

// llmLayer is decoder layer i: x + attention(norm(x)), then + MLP(norm(x)).
func llmLayer(g *infer.Builder, cfg *LLMConfig, x, pos, mask native.Tensor, i int) native.Tensor {
	p := cfg.layer(i)
	eps := cfg.Arch.Eps
	l := x.Ne()[1]
	d := int64(cfg.HeadDim)
	h := llmNorm(g, x, p+"input_layernorm.weight", eps)
	q := g.Ctx.Reshape(g.Linear(h, p+"self_attn.q_proj"), d, int64(cfg.Heads), l)
	k := g.Ctx.Reshape(g.Linear(h, p+"self_attn.k_proj"), d, int64(cfg.KVHeads), l)
	v := g.Linear(h, p+"self_attn.v_proj")
	if cfg.QKNorm {
		q = llmNorm(g, q, p+"self_attn.q_norm.weight", eps)
		k = llmNorm(g, k, p+"self_attn.k_norm.weight", eps)
	}
	q = llmRope(g.Ctx, q, pos, cfg)
	k = llmRope(g.Ctx, k, pos, cfg)
	a := gqaAttention(g.Ctx, q, k, v, mask)
	x = g.Ctx.Add(x, g.Linear(a, p+"self_attn.o_proj"))
	h = llmNorm(g, x, p+"post_attention_layernorm.weight", eps)
	gate := g.Ctx.SiLU(g.Linear(h, p+"mlp.gate_proj"))
	return g.Ctx.Add(x, g.Linear(g.Ctx.Mul(gate, g.Linear(h, p+"mlp.up_proj")), p+"mlp.down_proj"))
}

// llmNorm is RMSNorm over ne0 times the weight called name.
func llmNorm(g *infer.Builder, x native.Tensor, name string, eps float32) native.Tensor {
	return g.Ctx.Mul(g.Ctx.RMSNorm(x, eps), g.Weight(name))
}

// gqaAttention is causal grouped-query attention: q [d, H, L] and k
// [d, KV, L] (rotated), v [KV·d, L]; query head h reads key/value head
// h/(H/KV), as Hugging Face's repeat_kv groups them. mask, when valid, is
// an additive key mask [L]. It returns [H·d, L].
func gqaAttention(c *native.Context, q, k, v, mask native.Tensor) native.Tensor {
	nq, nk := q.Ne(), k.Ne()
	d, heads, l, kvHeads := nq[0], nq[1], nq[2], nk[1]
	if nk[0] != d || nk[2] != l || kvHeads <= 0 || heads%kvHeads != 0 || v.Ne()[0] != kvHeads*d {
		panic(&native.ShapeError{Msg: fmt.Sprintf("gqa attention: q %v, k %v, v %v", nq, nk, v.Ne())})
	}
	qh := c.Cont(c.Permute(q, 0, 2, 1, 3))                           // [d, L, H]
	kh := c.Cont(c.Permute(k, 0, 2, 1, 3))                           // [d, L, KV]
	vt := c.Cont(c.Permute(c.Reshape(v, d, kvHeads, l), 1, 2, 0, 3)) // [L, d, KV]
	kq := c.DiagMaskInf(c.MulMatDotF32(kh, qh), 0)                   // [Lk, Lq, H]
	if mask.Valid() {
		kq = c.Add(kq, mask)
	}
	kq = c.SoftMax(kq, float32(1/math.Sqrt(float64(d))))
	o := c.MulMatDotF32(vt, kq)          // [d, Lq, H]
	o = c.Cont(c.Permute(o, 0, 2, 1, 3)) // [d, H, Lq]
	return c.Reshape(o, d*heads, l)
}

// EncodeLLM runs the model's LLM on token ids and returns the hidden
// states layer selects (LLMPrompt.Layer): len(ids) rows of Hidden values.
func EncodeLLM(m *infer.Model, ids []int32, layer int) ([]float32, error) {
	return encodeLLM(m, ids, nil, []int{layer})
}

// encodeLLM runs the LLM on ids, keep (when not nil) false for padding no
// query attends to, and returns the hidden states layers select
// (llmOutputs): len(ids) rows of the LLM's width times their number.
func encodeLLM(m *infer.Model, ids []int32, keep []bool, layers []int) ([]float32, error) {
	cfg := LLM(m.Config)
	if cfg == nil {
		return nil, fmt.Errorf("%s: the model has no LLM text encoder", m.Path)
	}
	if len(ids) == 0 {
		return nil, errors.New("llm: no token ids")
	}
	for _, id := range ids {
		if id < 0 || int(id) >= cfg.Vocab {
			return nil, fmt.Errorf("%s: token id %d outside the LLM's %d rows (%sembed_tokens.weight)", m.Path, id, cfg.Vocab, cfg.Prefix)
		}
	}
	n := len(ids)
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(i)
	}
	var mk []float32
	if slices.Contains(keep, false) {
		mk = make([]float32, n)
		for i, k := range keep {
			if !k {
				mk[i] = float32(math.Inf(-1))
			}
		}
	}
	var hidden []float32
	err := m.Compute(func(g *infer.Builder) ([]infer.Input, native.Tensor) {
		it := infer.NewInput(g, formats.I32, int64(n))
		pt := infer.NewInput(g, formats.I32, int64(n))
		ins := []infer.Input{{T: it, I32: ids}, {T: pt, I32: pos}}
		var mt native.Tensor
		if mk != nil {
			mt = infer.NewInput(g, formats.F32, int64(n))
			ins = append(ins, infer.Input{T: mt, F32: mk})
		}
		return ins, llm(g, cfg, it, pt, mt, layers)
	}, func(o native.Tensor) error {
		var err error
		hidden, err = o.F32()
		return err
	})
	return hidden, err
}

// EncodeLLMPrompt wraps prompt in p's template, encodes it as sd-cli does
// and returns the hidden states after p.Drop leading tokens: tokens rows of
// the LLM's Hidden values (times the number of p.Layers when several are
// read). The prompt's attention weights (text.ParseAttention)
// scale its tokens' hidden states with their mean kept, as sd.cpp's
// apply_token_weights does.
func EncodeLLMPrompt(m *infer.Model, prompt string, p LLMPrompt) (hidden []float32, tokens int, err error) {
	cfg := LLM(m.Config)
	if cfg == nil {
		return nil, 0, fmt.Errorf("%s: the model has no LLM text encoder", m.Path)
	}
	ids, weights, err := PromptLayout(Tokenizer(m), prompt, p)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", m.Path, err)
	}
	if len(ids) <= p.Drop {
		return nil, 0, fmt.Errorf("%s: the prompt gives %d tokens, no more than the %d the template drops", m.Path, len(ids), p.Drop)
	}
	if p.BOS != "" {
		bos, ok := Tokenizer(m).TokenID(p.BOS)
		if !ok {
			return nil, 0, fmt.Errorf("%s: the LLM tokenizer has no token %q to begin the prompt with", m.Path, p.BOS)
		}
		ids, weights = append([]int32{bos}, ids...), append([]float32{1}, weights...)
	}
	keep := make([]bool, len(ids))
	for i := range keep {
		keep[i] = true
	}
	if n := p.MinTokens - len(ids); n > 0 {
		pad, ok := Tokenizer(m).TokenID(p.PadToken)
		if !ok {
			return nil, 0, fmt.Errorf("%s: the LLM tokenizer has no padding token %q", m.Path, p.PadToken)
		}
		for range n {
			ids, weights, keep = append(ids, pad), append(weights, 1), append(keep, false)
		}
	}
	h, err := encodeLLM(m, ids, keep, p.promptLayers())
	if err != nil {
		return nil, 0, err
	}
	width := len(h) / len(ids)
	infer.ApplyWeights(h, weights, width)
	n := len(ids) - p.Drop
	h = h[p.Drop*width:]
	if pad := p.MinHidden - n; pad > 0 {
		h, n = append(h, make([]float32, pad*width)...), p.MinHidden
	}
	return h, n, nil
}

// PromptLayout tokenizes the template's parts and the prompt's attention
// runs each on its own, as sd.cpp's LLMEmbedder::tokenize does, and gives
// each id its run's weight (the template's weigh 1).
func PromptLayout(tok *text.ByteBPETokenizer, prompt string, p LLMPrompt) ([]int32, []float32, error) {
	if tok == nil {
		return nil, nil, errors.New("no LLM tokenizer: pass --llm-tokenizer with the LLM's tokenizer.json (or a GGUF --llm file that embeds one, or embed one with `sdtool convert --tokenizer`)")
	}
	segs := []text.PromptSegment{{Text: p.Before, Weight: 1}}
	segs = append(segs, text.ParseAttention(prompt)...)
	segs = append(segs, text.PromptSegment{Text: p.After, Weight: 1})
	var ids []int32
	var ws []float32
	for _, s := range segs {
		for _, id := range tok.Encode(s.Text) {
			ids = append(ids, id)
			ws = append(ws, s.Weight)
		}
	}
	return ids, ws, nil
}

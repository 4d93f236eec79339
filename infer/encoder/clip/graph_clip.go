package clip

import (
	"errors"
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/text"
)

func init() {
	infer.RegisterEncoderKind("clip", infer.EncoderKind{Detect: detectCLIP, Tokenizer: loadCLIPKindTokenizer})
}

// Input is the input flag of the encoder's standalone file.
func (c *CLIPConfig) Input() string { return c.Component }

// Width is the width of the encoder's hidden states.
func (c *CLIPConfig) Width() int { return c.Hidden }

// CLIPEncoders returns the model's CLIP encoders, in the family's order.
func CLIPEncoders(c *infer.ModelConfig) []*CLIPConfig {
	var out []*CLIPConfig
	for _, e := range c.Encoders {
		if cc, ok := e.(*CLIPConfig); ok {
			out = append(out, cc)
		}
	}
	return out
}

// CLIPEncoder returns the CLIP encoder whose file comes from flag.
func CLIPEncoder(c *infer.ModelConfig, flag string) (*CLIPConfig, bool) {
	e, ok := c.Encoder(flag)
	cc, isCLIP := e.(*CLIPConfig)
	return cc, ok && isCLIP
}

// CLIPTokenizer returns the model's CLIP tokenizer (nil without CLIP).
func CLIPTokenizer(m *infer.Model) *text.CLIPTokenizer {
	t, _ := m.Tokenizers["clip"].(*text.CLIPTokenizer)
	return t
}

// loadCLIPKindTokenizer loads the CLIP tokenizer (loadModelTokenizer) and
// checks that every CLIP encoder's embedding has a row for each token.
func loadCLIPKindTokenizer(opt infer.LoadOptions, srcs []*infer.OpenSource, encs []infer.EncoderConfig, main string) (any, error) {
	tok, err := loadModelTokenizer(opt.Tokenizers["clip"], srcs)
	if err != nil {
		return nil, err
	}
	for _, e := range encs {
		if t := e.(*CLIPConfig); tok.VocabSize() > t.Vocab {
			return nil, fmt.Errorf("%s: the tokenizer has %d tokens, the %s text encoder's embedding %d rows", main, tok.VocabSize(), t.Component, t.Vocab)
		}
	}
	return tok, nil
}

// loadModelTokenizer takes --tokenizer when given, else merges embedded in
// the metadata of the first component file that has them (the text
// encoders' own files first, then the model's, then any other).
func loadModelTokenizer(file string, srcs []*infer.OpenSource) (*text.CLIPTokenizer, error) {
	if file != "" {
		return text.LoadCLIPTokenizer(file)
	}
	order := []string{"clip_l", "clip_g", "model", "diffusion-model", "t5xxl", "vae"}
	for _, flag := range order {
		for _, s := range srcs {
			if s.Comp.Flag != flag {
				continue
			}
			t, err := text.CLIPTokenizerFromMetadata(s.M.Path(), s.M.Metadata())
			if errors.Is(err, text.ErrNoTokenizer) {
				continue
			}
			return t, err
		}
	}
	return nil, fmt.Errorf("%s: %w; pass --tokenizer with CLIP's tokenizer.json or merges (or embed one with `sdtool convert --tokenizer`)", srcs[0].M.Path(), text.ErrNoTokenizer)
}

// FirstEOS returns the index of the first end-of-text token (the pooled
// position), the last index when there is none, as sd.cpp takes it.
func FirstEOS(ids []int, eos int) int {
	for i, id := range ids {
		if id == eos {
			return i
		}
	}
	return len(ids) - 1
}

// ZeroAfterEOS sets every id after the first end-of-text token of each chunk to 0. sd-cli feeds SDXL's
// OpenCLIP bigG the CLIP-L ids changed so, which differs from padding with 0 where a BREAK has filled a
// chunk with end-of-text tokens.
func ZeroAfterEOS(ids []int, chunk, eos int) {
	for lo := 0; lo+chunk <= len(ids); lo += chunk {
		c := ids[lo : lo+chunk]
		if at := FirstEOS(c, eos); c[at] == eos {
			clear(c[at+1:])
		}
	}
}

// RunCLIP evaluates one CLIP text encoder on one chunk of ids: its hidden
// states [len(ids)][Hidden] and, when pooledAt >= 0, its pooled output.
func RunCLIP(m *infer.Model, e *CLIPConfig, ids []int, pooledAt int) (hidden, pooled []float32, err error) {
	idv := make([]int32, len(ids))
	for i, id := range ids {
		idv[i] = int32(id)
	}
	var pt native.Tensor
	err = m.Compute(func(g *infer.Builder) ([]infer.Input, native.Tensor) {
		t := infer.NewInput(g, formats.I32, int64(len(idv)))
		h, p := CLIP(g, e, t, pooledAt)
		pt = p
		return []infer.Input{{T: t, I32: idv}}, h
	}, func(o native.Tensor) error {
		var err error
		if hidden, err = o.F32(); err != nil {
			return err
		}
		if pt.Valid() {
			pooled, err = pt.F32()
		}
		return err
	})
	return hidden, pooled, err
}

// CLIP builds the CLIP text transformer under cfg.Prefix (Hugging Face
// naming, which names.Convert also gives OpenCLIP checkpoints) for token ids
// [L] (L <= Positions) and returns the hidden states [Hidden, L] of the layer
// cfg.Skip selects (through the final layer norm when cfg.FinalNorm). When
// pooledAt >= 0 it also returns the pooled output [Projection or Hidden]:
// the last layer's state at token pooledAt after the final layer norm,
// through text_projection when the model has one (SDXL's OpenCLIP bigG),
// marked as a graph output; otherwise pooled is the zero Tensor.
func CLIP(g *infer.Builder, cfg *CLIPConfig, ids native.Tensor, pooledAt int) (hidden, pooled native.Tensor) {
	p := cfg.Prefix
	l := ids.Ne()[0]
	x := g.Ctx.GetRows(g.Weight(p+"embeddings.token_embedding.weight"), ids)
	pos := g.Weight(p + "embeddings.position_embedding.weight")
	pne, pnb := pos.Ne(), pos.Nb()
	if l > pne[1] {
		panic(&native.ShapeError{Msg: fmt.Sprintf("clip: %d tokens, %d positions", l, pne[1])})
	}
	if pooledAt >= int(l) {
		panic(&native.ShapeError{Msg: fmt.Sprintf("clip: pooled token %d of %d", pooledAt, l)})
	}
	x = g.Ctx.Add(x, g.Ctx.View(pos, [4]int64{pne[0], l, 1, 1}, pnb[1], pnb[1]*l, pnb[1]*l, 0))
	layers := cfg.Layers - (cfg.Skip - 1)
	if pooledAt >= 0 {
		layers = cfg.Layers
	}
	for i := 0; i < layers; i++ {
		if i == cfg.Layers-(cfg.Skip-1) {
			hidden = x
		}
		b := fmt.Sprintf("%sencoder.layers.%d.", p, i)
		h := g.LayerNorm(x, b+"layer_norm1", infer.LayerNormEps)
		var q, k, v native.Tensor
		if cfg.FusedQKV {
			qkv := g.Linear(h, b+"self_attn.in_proj")
			ne, nb := qkv.Ne(), qkv.Nb()
			third := [4]int64{ne[0] / 3, ne[1], ne[2], ne[3]}
			q = g.Ctx.Cont(g.Ctx.View(qkv, third, nb[1], nb[2], nb[3], 0))
			k = g.Ctx.Cont(g.Ctx.View(qkv, third, nb[1], nb[2], nb[3], third[0]*nb[0]))
			v = g.Ctx.Cont(g.Ctx.View(qkv, third, nb[1], nb[2], nb[3], 2*third[0]*nb[0]))
		} else {
			q = g.Linear(h, b+"self_attn.q_proj")
			k = g.Linear(h, b+"self_attn.k_proj")
			v = g.Linear(h, b+"self_attn.v_proj")
		}
		a := infer.Attention(g.Ctx, q, k, v, cfg.Heads, true)
		x = g.Ctx.Add(x, g.Linear(a, b+"self_attn.out_proj"))
		h = g.Linear(g.LayerNorm(x, b+"layer_norm2", infer.LayerNormEps), b+"mlp.fc1")
		if cfg.QuickGELU {
			h = g.Ctx.GELUQuick(h)
		} else {
			h = g.Ctx.GELU(h)
		}
		x = g.Ctx.Add(x, g.Linear(h, b+"mlp.fc2"))
	}
	if !hidden.Valid() {
		hidden = x
	}
	if cfg.FinalNorm {
		hidden = g.LayerNorm(hidden, p+"final_layer_norm", infer.LayerNormEps)
	}
	if pooledAt >= 0 {
		last := g.LayerNorm(x, p+"final_layer_norm", infer.LayerNormEps)
		ne, nb := last.Ne(), last.Nb()
		pooled = g.Ctx.Cont(g.Ctx.View(last, [4]int64{ne[0], 1, 1, 1}, nb[1], nb[1], nb[1], int64(pooledAt)*nb[1]))
		if cfg.Projection > 0 {
			w := g.Weight(p + "text_projection")
			g.Watch(w, pooled)
			pooled = g.Ctx.MulMat(w, pooled)
		}
		pooled = g.Output(pooled)
	}
	return hidden, pooled
}

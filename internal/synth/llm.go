package synth

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/text"
)

// LLM is a decoder-only LLM text encoder file (what sd-cli's --llm takes):
// Qwen3 (q_norm and k_norm), Qwen2.5-VL's text model (q, k, v biases) or
// Mistral Small 3.x (neither),
// given by its exact sizes, every tensor under Hugging Face's names
// (model.layers.N.self_attn.q_proj.weight, as ComfyUI's qwen_3_4b and
// qwen_2.5_vl_7b files) or llama.cpp's (blk.N.attn_q.weight), with
// deterministic values and optionally a byte-level BPE tokenizer embedded
// under tokenizer.ggml.* (GGUF only).
type LLM struct {
	// QKNorm selects Qwen3's per-head q_norm/k_norm; otherwise the q, k
	// and v projections have biases (Qwen2.5-VL) unless Mistral is set.
	QKNorm bool
	// Mistral drops the biases too (Mistral Small 3.x, llama.cpp's "llama").
	Mistral bool
	// Hidden, FF, Layers, Heads, KVHeads, HeadDim and Vocab are the sizes.
	Hidden, FF, Layers, Heads, KVHeads, HeadDim, Vocab int
	// Seed selects the values.
	Seed int64
	// Type is the float type of the 1-D tensors and, without Quant, of all.
	Type formats.DType
	// Quant, when not 0, is the type of the 2-D weights (embedding included).
	Quant formats.DType
	// GGUFNames writes llama.cpp's names instead of Hugging Face's.
	GGUFNames bool
	// Tokenizer, when not nil, is embedded in GGUF metadata.
	Tokenizer *text.ByteBPEVocab
	// SameRowsFrom, when above 0, gives every embedding row from this id on
	// the values of that row, so that ids there are interchangeable (an
	// oracle that numbers the control tokens differently still agrees).
	SameRowsFrom int
	// UnkRowsFrom, when above 0, gives every embedding row from this id on
	// the values of row 0 (the unknown token's), so that an oracle whose
	// stub vocabulary turns every piece into id 0 still agrees.
	UnkRowsFrom int
}

// Qwen3x4B and Qwen25VLEncoder7B are the text encoders of Z-Image and Qwen-Image
// at their real widths, two layers deep and q8_0 (the embedding's 152k rows
// are most of the file, about 0.6 GB); Qwen3x8B is Flux.2 klein 9B's
// (Qwen3-8B's widths, about 0.8 GB).
var (
	Qwen3x4B          = LLM{QKNorm: true, Hidden: 2560, FF: 9728, Layers: 2, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 151936, Seed: 11, Type: formats.F32, Quant: formats.Q8_0}
	Qwen3x8B          = LLM{QKNorm: true, Hidden: 4096, FF: 12288, Layers: 2, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 151936, Seed: 13, Type: formats.F32, Quant: formats.Q8_0}
	Qwen25VLEncoder7B = LLM{Hidden: 3584, FF: 18944, Layers: 2, Heads: 28, KVHeads: 4, HeadDim: 128, Vocab: 152064, Seed: 12, Type: formats.F32, Quant: formats.Q8_0}
)

// Tensors lists the LLM's tensors in file order, with their value
// distributions; names are Hugging Face's (the values are drawn from them
// whatever the naming written).
func (c LLM) Tensors() []TensorSpec {
	h, q, kv, ff := int64(c.Hidden), int64(c.Heads*c.HeadDim), int64(c.KVHeads*c.HeadDim), int64(c.FF)
	var out []TensorSpec
	add := func(name string, init Init, shape ...int64) {
		out = append(out, TensorSpec{Name: name, Shape: shape, Init: init})
	}
	add("model.embed_tokens.weight", InitWeight, int64(c.Vocab), h)
	for i := 0; i < c.Layers; i++ {
		p := "model.layers." + strconv.Itoa(i) + "."
		add(p+"input_layernorm.weight", InitOne, h)
		add(p+"self_attn.q_proj.weight", InitWeight, q, h)
		add(p+"self_attn.k_proj.weight", InitWeight, kv, h)
		add(p+"self_attn.v_proj.weight", InitWeight, kv, h)
		if !c.QKNorm && !c.Mistral {
			add(p+"self_attn.q_proj.bias", InitBias, q)
			add(p+"self_attn.k_proj.bias", InitBias, kv)
			add(p+"self_attn.v_proj.bias", InitBias, kv)
		} else if c.QKNorm {
			add(p+"self_attn.q_norm.weight", InitOne, int64(c.HeadDim))
			add(p+"self_attn.k_norm.weight", InitOne, int64(c.HeadDim))
		}
		add(p+"self_attn.o_proj.weight", InitWeight, h, q)
		add(p+"post_attention_layernorm.weight", InitOne, h)
		add(p+"mlp.gate_proj.weight", InitWeight, ff, h)
		add(p+"mlp.up_proj.weight", InitWeight, ff, h)
		add(p+"mlp.down_proj.weight", InitWeight, h, ff)
	}
	add("model.norm.weight", InitOne, h)
	return out
}

// llamaCppNames maps Hugging Face's LLM names to llama.cpp's.
var llamaCppNames = map[string]string{
	"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
	"self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
	"self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
	"self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
	"self_attn.o_proj.weight": "attn_output.weight",
	"mlp.gate_proj.weight":    "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}

// fileName is the name t is written under.
func (c LLM) fileName(hf string) string {
	if !c.GGUFNames {
		return hf
	}
	switch hf {
	case "model.embed_tokens.weight":
		return "token_embd.weight"
	case "model.norm.weight":
		return "output_norm.weight"
	}
	var layer int
	var rest string
	if _, err := fmt.Sscanf(hf, "model.layers.%d.%s", &layer, &rest); err == nil {
		return fmt.Sprintf("blk.%d.%s", layer, llamaCppNames[rest])
	}
	return hf
}

// typeOf is the stored type of t.
func (c LLM) typeOf(t TensorSpec) formats.DType {
	if c.Quant != 0 && len(t.Shape) == 2 && t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	return c.Type
}

// EncodeAs writes the LLM to w in format "gguf" or "safetensors".
func (c LLM) EncodeAs(w io.Writer, format string) error {
	ts := c.Tensors()
	desc := make([]formats.Tensor, len(ts))
	for i, t := range ts {
		desc[i] = formats.Tensor{Name: c.fileName(t.Name), Type: c.typeOf(t), Shape: t.Shape}
		var err error
		if desc[i].Size, err = desc[i].Type.Bytes(t.Shape); err != nil {
			return fmt.Errorf("tensor %q: %w", desc[i].Name, err)
		}
	}
	var tw formats.TensorWriter
	var err error
	switch format {
	case "gguf":
		arch := "qwen3"
		switch {
		case c.Mistral:
			arch = "llama"
		case !c.QKNorm:
			arch = "qwen2vl"
		}
		md := formats.Metadata{{Key: "general.architecture", Type: formats.TypeString, Value: arch},
			{Key: "general.name", Type: formats.TypeString, Value: "synthetic " + arch},
			{Key: arch + ".attention.key_length", Type: formats.TypeUint32, Value: uint32(c.HeadDim)}}
		if c.Tokenizer != nil {
			md = append(md, c.Tokenizer.GGUFMetadata()...)
		}
		tw, err = gguf.NewWriter(w, desc, md, nil)
	case "safetensors":
		cr, ok := formats.CreatorNamed("safetensors")
		if !ok {
			return errors.New("synth: the safetensors writer is not linked in")
		}
		tw, err = cr.New(w, desc, formats.WriteOptions{})
	default:
		return fmt.Errorf("synth: unknown output format %q", format)
	}
	if err != nil {
		return err
	}
	spec := Spec{Seed: c.Seed, DType: formats.F32}
	for i, t := range ts {
		var from, like int64 // rows from `from` on repeat row `like`
		switch {
		case i > 0:
		case c.SameRowsFrom > 0:
			from, like = int64(c.SameRowsFrom)+1, int64(c.SameRowsFrom)
		case c.UnkRowsFrom > 0:
			from = int64(c.UnkRowsFrom)
		}
		if err := writeRows(tw, spec, t, desc[i].Type, from, like); err != nil {
			return fmt.Errorf("tensor %q: %w", desc[i].Name, err)
		}
	}
	return tw.Close()
}

// writeRows is writeValues in chunks of rows, so that a 152k-row embedding
// never sits in memory whole as f32; rows from `from` on (when above 0)
// repeat row like (below from).
func writeRows(w io.Writer, spec Spec, t TensorSpec, typ formats.DType, from, like int64) error {
	t.Type = formats.F32
	n, _ := formats.Elements(t.Shape)
	row := t.Shape[len(t.Shape)-1]
	rb, err := typ.RowBytes(row)
	if err != nil {
		return err
	}
	enc, err := quant.Encoder(typ)
	if err != nil {
		return err
	}
	const chunk = 1024 // rows
	src := Data(spec, t)
	raw := make([]byte, 4*row*chunk)
	f := make([]float32, row*chunk)
	out := make([]byte, rb*chunk)
	var kept []byte // row like, encoded
	for done := int64(0); done < n/row; {
		if from > 0 && done >= from {
			if _, err := w.Write(kept); err != nil {
				return err
			}
			done++
			continue
		}
		k := min(chunk, n/row-done)
		if from > 0 {
			k = min(k, from-done)
		}
		if _, err := io.ReadFull(src, raw[:4*row*k]); err != nil {
			return err
		}
		for j := range f[:row*k] {
			f[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
		for r := int64(0); r < k; r++ {
			enc.Quantize(out[r*rb:(r+1)*rb], f[r*row:(r+1)*row], nil)
		}
		if _, err := w.Write(out[:rb*k]); err != nil {
			return err
		}
		if from > 0 && like >= done && like < done+k {
			kept = slices.Clone(out[(like-done)*rb : (like-done+1)*rb])
		}
		done += k
	}
	return nil
}

// Write generates the LLM into path, in the format its extension chooses
// (.gguf or .safetensors), through the pipeline's atomic publish.
func (c LLM) Write(path string) error {
	cr, err := formats.CreatorFor(path)
	if err != nil {
		return err
	}
	return pipeline.WriteAtomic(context.Background(), path, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
		return c.EncodeAs(w, cr.Name)
	})
}

package synth

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/text"
)

// T5 is a T5 v1.1 encoder file (what sd-cli's --t5xxl takes, or the T5 part
// of a single-file Flux model) given by its exact sizes: every tensor under
// its real name in one of the naming schemes people publish, deterministic
// values, and a SentencePiece unigram tokenizer for a short word list (ids
// 0..2 are T5's <pad>, </s> and <unk>) that Encode embeds in GGUF metadata
// under llama.cpp's keys. stable-diffusion.cpp takes the head count as the
// attention width over 64, so a file meant for sd-cli needs HeadDim 64
// (sdtool reads the head count from the bias table, so any split loads).
type T5 struct {
	// Hidden (d_model), FF (d_ff), Layers, Heads and HeadDim (d_kv) shape the encoder.
	Hidden, FF, Layers, Heads, HeadDim int
	// Buckets is the relative-attention bucket count (T5: 32).
	Buckets int
	// Vocab is the token embedding's row count; 0 (or fewer than the
	// tokenizer's pieces) means one row per piece. T5-XXL has 32128 rows for
	// 32100 pieces.
	Vocab int
	// Words are the words the tokenizer knows whole (as "▁word"); single
	// letters spell the rest.
	Words []string
	// Seed selects the values.
	Seed int64
	// Type is the float type of every tensor (F16 or F32).
	Type formats.DType
	// Quant, when not 0, is the type of the 2-D linear weights whose rows
	// are whole blocks of it (the embeddings and the bias table stay in Type).
	Quant formats.DType
	// Naming selects the tensor names: T5HF (shared., encoder.block.N.,
	// as T5EncoderModel and the t5xxl files sd-cli's docs point to),
	// T5Comfy (the same under text_encoders.t5xxl.transformer., as in
	// single-file checkpoints) or T5GGUF (llama.cpp's token_embd.,
	// enc.blk.N.attn_q., as city96's T5 GGUFs).
	Naming string
	// LayerBias gives every layer its own relative-attention bias table,
	// as UMT5 (Wan's text encoder) has; T5 v1.1 has layer 0's only.
	LayerBias bool
}

// The T5 naming schemes.
const (
	T5HF    = "hf"
	T5Comfy = "comfy"
	T5GGUF  = "gguf"
)

// TinyT5 is a T5 encoder small enough for unit tests and testdata: 64 wide,
// two layers of 4 heads of 16, FF 128, 32 buckets, f16.
var TinyT5 = T5{Hidden: 64, FF: 128, Layers: 2, Heads: 4, HeadDim: 16, Buckets: 32, Words: DefaultWords, Seed: 7, Type: formats.F16}

// t5Specials are T5's special pieces at its ids 0, 1 and 2.
var t5Specials = []text.UnigramPiece{
	{Text: "<pad>", Type: text.PieceControl},
	{Text: "</s>", Type: text.PieceControl},
	{Text: "<unk>", Type: text.PieceUnknown},
}

// Tokenizer returns the model's unigram tokenizer: the special pieces,
// "▁word" for each word (score -1), "▁" and the letters a-z (score -5),
// with SentencePiece's usual whitespace handling and </s> appended.
func (c T5) Tokenizer() (*text.UnigramTokenizer, error) {
	pieces := append([]text.UnigramPiece(nil), t5Specials...)
	seen := map[string]bool{}
	add := func(s string, score float32) {
		if !seen[s] {
			seen[s] = true
			pieces = append(pieces, text.UnigramPiece{Text: s, Score: score, Type: text.PieceNormal})
		}
	}
	for _, w := range c.Words {
		add("\u2581"+w, -1)
	}
	add("\u2581", -5)
	for ch := 'a'; ch <= 'z'; ch++ {
		add(string(ch), -5)
	}
	return text.NewUnigramTokenizer(text.UnigramSpec{
		Pieces: pieces, UnkID: 2, EOSID: 1, BOSID: -1, PadID: 0, AddEOS: true,
		AddDummyPrefix: true, RemoveExtraWhitespaces: true, EscapeWhitespaces: true,
	})
}

// rows is the token embedding's row count.
func (c T5) rows() (int, error) {
	tok, err := c.Tokenizer()
	if err != nil {
		return 0, err
	}
	return max(c.Vocab, tok.VocabSize()), nil
}

// t5GGUFNames are llama.cpp's names for the parts of a T5 encoder block
// and its ends (the HF names' suffixes after encoder.block.N.).
var t5GGUFNames = map[string]string{
	"layer.0.SelfAttention.q.weight":                       "attn_q.weight",
	"layer.0.SelfAttention.k.weight":                       "attn_k.weight",
	"layer.0.SelfAttention.v.weight":                       "attn_v.weight",
	"layer.0.SelfAttention.o.weight":                       "attn_o.weight",
	"layer.0.SelfAttention.relative_attention_bias.weight": "attn_rel_b.weight",
	"layer.0.layer_norm.weight":                            "attn_norm.weight",
	"layer.1.DenseReluDense.wi_0.weight":                   "ffn_gate.weight",
	"layer.1.DenseReluDense.wi_1.weight":                   "ffn_up.weight",
	"layer.1.DenseReluDense.wo.weight":                     "ffn_down.weight",
	"layer.1.layer_norm.weight":                            "ffn_norm.weight",
}

// name gives an HF T5 name (shared.weight, encoder.block.N.…) in c's naming.
func (c T5) name(hf string) string {
	switch c.Naming {
	case T5Comfy:
		return "text_encoders.t5xxl.transformer." + hf
	case T5GGUF:
		switch hf {
		case "shared.weight":
			return "token_embd.weight"
		case "encoder.final_layer_norm.weight":
			return "enc.output_norm.weight"
		}
		rest := strings.TrimPrefix(hf, "encoder.block.")
		if dot := strings.IndexByte(rest, '.'); dot > 0 {
			if to, ok := t5GGUFNames[rest[dot+1:]]; ok {
				return "enc.blk." + rest[:dot+1] + to
			}
		}
	}
	return hf
}

// Tensors lists the encoder's tensors in file order, in c's naming.
func (c T5) Tensors() ([]TensorSpec, error) {
	if c.Hidden <= 0 || c.FF <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.HeadDim <= 0 || c.Buckets < 2 {
		return nil, fmt.Errorf("synth: T5 sizes %+v must all be positive (buckets at least 2)", c)
	}
	switch c.Naming {
	case "", T5HF, T5Comfy, T5GGUF:
	default:
		return nil, fmt.Errorf("synth: unknown T5 naming %q (want %s, %s or %s)", c.Naming, T5HF, T5Comfy, T5GGUF)
	}
	vocab, err := c.rows()
	if err != nil {
		return nil, err
	}
	var out []TensorSpec
	add := func(hf string, init Init, shape ...int64) {
		out = append(out, TensorSpec{Name: c.name(hf), Shape: shape, Init: init})
	}
	h, ff, inner := int64(c.Hidden), int64(c.FF), int64(c.Heads*c.HeadDim)
	add("shared.weight", InitWeight, int64(vocab), h)
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("encoder.block.%d.layer.", i)
		for _, n := range []string{"q", "k", "v"} {
			add(p+"0.SelfAttention."+n+".weight", InitWeight, inner, h)
		}
		add(p+"0.SelfAttention.o.weight", InitWeight, h, inner)
		if i == 0 || c.LayerBias {
			add(p+"0.SelfAttention.relative_attention_bias.weight", InitWeight, int64(c.Buckets), int64(c.Heads))
		}
		add(p+"0.layer_norm.weight", InitOne, h)
		add(p+"1.DenseReluDense.wi_0.weight", InitWeight, ff, h)
		add(p+"1.DenseReluDense.wi_1.weight", InitWeight, ff, h)
		add(p+"1.DenseReluDense.wo.weight", InitWeight, h, ff)
		add(p+"1.layer_norm.weight", InitOne, h)
	}
	add("encoder.final_layer_norm.weight", InitOne, h)
	return out, nil
}

// typeOf is the stored type of a tensor.
func (c T5) typeOf(t TensorSpec) formats.DType {
	if c.Quant != 0 && len(t.Shape) == 2 && !strings.Contains(t.Name, "shared") && !strings.Contains(t.Name, "token_embd") &&
		!strings.Contains(t.Name, "rel") && t.Shape[1]%int64(c.Quant.Info().BlockSize) == 0 {
		return c.Quant
	}
	if c.Type == 0 {
		return formats.F32
	}
	return c.Type
}

// Metadata returns the GGUF metadata: the architecture and the tokenizer.
func (c T5) Metadata() (formats.Metadata, error) {
	tok, err := c.Tokenizer()
	if err != nil {
		return nil, err
	}
	md := formats.Metadata{
		{Key: "general.architecture", Type: formats.TypeString, Value: "t5encoder"},
		{Key: "general.name", Type: formats.TypeString, Value: "tiny synthetic t5"},
	}
	return text.EmbedUnigram(md, tok), nil
}

// EncodeAs writes the encoder to w in format "gguf" (with the tokenizer in
// its metadata) or "safetensors" (tensors only: safetensors metadata holds
// strings, and sdtool reads a unigram vocabulary from GGUF only).
func (c T5) EncodeAs(w io.Writer, format string) error {
	ts, err := c.Tensors()
	if err != nil {
		return err
	}
	desc := make([]formats.Tensor, len(ts))
	for i, t := range ts {
		desc[i] = formats.Tensor{Name: t.Name, Type: c.typeOf(t), Shape: t.Shape}
	}
	var tw formats.TensorWriter
	switch format {
	case "gguf":
		md, err := c.Metadata()
		if err != nil {
			return err
		}
		tw, err = gguf.NewWriter(w, desc, md, nil)
		if err != nil {
			return err
		}
	case "safetensors":
		cr, ok := formats.CreatorNamed("safetensors")
		if !ok {
			return errors.New("synth: the safetensors writer is not linked in")
		}
		for i := range desc {
			if desc[i].Size, err = desc[i].Type.Bytes(desc[i].Shape); err != nil {
				return fmt.Errorf("tensor %q: %w", desc[i].Name, err)
			}
		}
		if tw, err = cr.New(w, desc, formats.WriteOptions{}); err != nil {
			return err
		}
	default:
		return fmt.Errorf("synth: unknown output format %q", format)
	}
	// Values are drawn from the HF name, so every naming holds the same numbers.
	spec := Spec{Seed: c.Seed, DType: formats.F32}
	hfNames, _ := c.withNaming(T5HF).Tensors()
	for i, t := range ts {
		t.Name = hfNames[i].Name
		if err := writeValues(tw, spec, t, desc[i].Type); err != nil {
			return fmt.Errorf("tensor %q: %w", desc[i].Name, err)
		}
	}
	return tw.Close()
}

// withNaming returns c with another naming.
func (c T5) withNaming(n string) T5 { c.Naming = n; return c }

// writeValues draws t's values as f32 and writes them encoded as typ, row by row.
func writeValues(w io.Writer, spec Spec, t TensorSpec, typ formats.DType) error {
	t.Type = formats.F32
	n, _ := formats.Elements(t.Shape)
	raw := make([]byte, 4*n)
	if _, err := io.ReadFull(Data(spec, t), raw); err != nil {
		return err
	}
	f := make([]float32, n)
	for j := range f {
		f[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
	}
	enc, err := quant.Encoder(typ)
	if err != nil {
		return err
	}
	row := t.Shape[len(t.Shape)-1]
	rb, err := typ.RowBytes(row)
	if err != nil {
		return err
	}
	out := make([]byte, rb*(n/row))
	for r := int64(0); r < n/row; r++ {
		enc.Quantize(out[r*rb:(r+1)*rb], f[r*row:(r+1)*row], nil)
	}
	_, err = w.Write(out)
	return err
}

// Write generates the encoder into path, in the format its extension
// chooses (.gguf or .safetensors), through the pipeline's atomic publish.
func (c T5) Write(path string) error {
	cr, err := formats.CreatorFor(path)
	if err != nil {
		return err
	}
	return pipeline.WriteAtomic(context.Background(), path, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
		return c.EncodeAs(w, cr.Name)
	})
}

package t5

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/text"
)

// T5 conditioning as stable-diffusion.cpp (97d2990) computes it for Flux
// (FluxCLIPEmbedder in src/conditioning/conditioner.hpp, T5Runner in
// src/model/te/t5.hpp): the prompt's attention runs are tokenized each on
// its own, laid out in chunks of text.FluxT5Length (256) ids ending in </s>
// and padded with <pad> (text.UnigramTokenizer.ChunkedLayout), T5 runs once
// per chunk without an attention mask, each chunk's hidden states are
// scaled by the prompt weights with their mean kept (applyWeights), and the
// chunks are concatenated.

// t5Bucket is T5's bidirectional relative-position bucket of a key at
// relative position rel (key index minus query index) with n buckets: half
// for keys after the query, half for keys at or before it; within a half,
// distances below n/4 get a bucket each and larger ones share
// logarithmically spaced buckets up to maxDistance. The arithmetic is
// float32, as sd.cpp's and PyTorch's.
func t5Bucket(rel, n, maxDistance int) int32 {
	n /= 2
	bucket := 0
	if rel > 0 {
		bucket = n
	}
	a := rel
	if a < 0 {
		a = -a
	}
	exact := n / 2
	if a < exact {
		return int32(bucket + a)
	}
	logPos := float32(math.Log(float64(float32(a) / float32(exact))))
	logBase := float32(math.Log(float64(float32(maxDistance) / float32(exact))))
	large := exact + int(logPos/logBase*float32(n-exact))
	return int32(bucket + min(large, n-1))
}

// t5Buckets returns the buckets of every (query, key) pair of n tokens,
// query-major (index query·n + key), as the graph's buckets input.
func t5Buckets(n, buckets, maxDistance int) []int32 {
	out := make([]int32, n*n)
	for q := 0; q < n; q++ {
		for k := 0; k < n; k++ {
			out[q*n+k] = t5Bucket(k-q, buckets, maxDistance)
		}
	}
	return out
}

// EncodeT5 runs the model's T5 encoder on one sequence of token ids (what
// sd-cli runs per chunk: text.FluxT5Length ids for Flux) and returns its
// hidden states after the final norm, len(ids) rows of the T5 encoder's Hidden
// values. mask, when not nil, has one entry per id, false for padding that
// no query may attend to (Chroma's T5 mask; Flux uses none).
func EncodeT5(m *infer.Model, ids []int32, mask []bool) ([]float32, error) {
	cfg := T5(m.Config)
	if cfg == nil {
		return nil, fmt.Errorf("%s: the model has no T5 encoder", m.Path)
	}
	return encodeT5(m, cfg, ids, mask)
}

func encodeT5(m *infer.Model, cfg *T5Config, ids []int32, mask []bool) ([]float32, error) {
	if len(ids) == 0 {
		return nil, errors.New("t5: no token ids")
	}
	if mask != nil && len(mask) != len(ids) {
		return nil, fmt.Errorf("t5: %d mask entries for %d ids", len(mask), len(ids))
	}
	for _, id := range ids {
		if id < 0 || int(id) >= cfg.Vocab {
			return nil, fmt.Errorf("%s: token id %d outside the T5 encoder's %d rows (%s)", m.Path, id, cfg.Vocab, cfg.Embedding)
		}
	}
	n := len(ids)
	bk := t5Buckets(n, cfg.Buckets, cfg.MaxDistance)
	var mk []float32
	if mask != nil {
		mk = make([]float32, n)
		for i, keep := range mask {
			if !keep {
				mk[i] = float32(math.Inf(-1))
			}
		}
	}
	var hidden []float32
	err := m.Compute(func(g *infer.Builder) ([]infer.Input, native.Tensor) {
		it := infer.NewInput(g, formats.I32, int64(n))
		bt := infer.NewInput(g, formats.I32, int64(n*n))
		ins := []infer.Input{{T: it, I32: ids}, {T: bt, I32: bk}}
		var mt native.Tensor
		if mk != nil {
			mt = infer.NewInput(g, formats.F32, int64(n))
			ins = append(ins, infer.Input{T: mt, F32: mk})
		}
		return ins, t5(g, cfg, it, bt, mt)
	}, func(o native.Tensor) error {
		var err error
		hidden, err = o.F32()
		return err
	})
	return hidden, err
}

// T5Context is the T5 half of Flux's conditioning as sd-cli computes it
// (see the top of this file): the context, tokens rows of the T5 encoder's Hidden
// values, tokens a multiple of chunkLen (text.FluxT5Length for Flux). tok
// may be nil when no T5 tokenizer was found; then only a prompt without
// text (which gives </s> and padding) can be encoded.
func T5Context(m *infer.Model, tok *text.UnigramTokenizer, prompt string, chunkLen int) (ctx []float32, tokens int, err error) {
	ctx, keep, err := T5ContextMasked(m, tok, prompt, chunkLen, false)
	return ctx, len(keep), err
}

// T5ContextMasked is t5Context that also returns which tokens are not
// padding (sd-cli's T5 attention mask, which Chroma's DiT takes), and with
// maskKeys hides the padding from every query inside T5 as well (sd-cli's
// chroma_use_t5_mask; text.ChromaT5Length is Chroma's chunk length).
func T5ContextMasked(m *infer.Model, tok *text.UnigramTokenizer, prompt string, chunkLen int, maskKeys bool) (ctx []float32, keep []bool, err error) {
	cfg := T5(m.Config)
	if cfg == nil {
		return nil, nil, fmt.Errorf("%s: the model has no T5 encoder", m.Path)
	}
	layout, weights, err := t5Layout(tok, prompt, chunkLen)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", m.Path, err)
	}
	keep = layout.Mask()
	n := len(layout.IDs)
	ctx = make([]float32, 0, n*cfg.Hidden)
	for lo := 0; lo < n; lo += chunkLen {
		var mask []bool
		if maskKeys {
			mask = keep[lo : lo+chunkLen]
		}
		h, err := encodeT5(m, cfg, layout.IDs[lo:lo+chunkLen], mask)
		if err != nil {
			return nil, nil, err
		}
		infer.ApplyWeights(h, weights[lo:lo+chunkLen], cfg.Hidden)
		ctx = append(ctx, h...)
	}
	return ctx, keep, nil
}

// t5Layout tokenizes a weighted prompt for T5 as sd-cli does: each
// attention run on its own, its ids keeping its weight, laid out in chunks
// of chunkLen (</s> and padding weigh 1).
func t5Layout(tok *text.UnigramTokenizer, prompt string, chunkLen int) (text.TokenLayout, []float32, error) {
	var ids []int32
	var ws []float32
	for _, seg := range text.ParseAttention(prompt) {
		if seg.Text == "" {
			continue
		}
		if tok == nil && strings.Trim(seg.Text, " \t\r\n") == "" {
			// T5's SentencePiece normalizer removes whitespace-only text, so a
			// blank prompt is </s> and padding with or without the vocabulary.
			continue
		}
		if tok == nil {
			return text.TokenLayout{}, nil, fmt.Errorf("no T5 tokenizer for the prompt %q: pass --t5-tokenizer with T5's spiece.model or tokenizer.json (or embed one with `sdtool convert --tokenizer`)", prompt)
		}
		p := tok.Tokenize(seg.Text)
		ids = append(ids, p...)
		for range p {
			ws = append(ws, seg.Weight)
		}
	}
	if tok == nil {
		tok = t5FallbackTokenizer()
	}
	l := tok.ChunkedLayout(ids, chunkLen)
	if len(l.IDs)%chunkLen != 0 {
		return text.TokenLayout{}, nil, fmt.Errorf("t5: chunk length %d cannot hold </s>", chunkLen)
	}
	w := make([]float32, len(l.IDs))
	for i, s := range l.Source {
		w[i] = 1
		if s >= 0 {
			w[i] = ws[s]
		}
	}
	return l, w, nil
}

// t5FallbackTokenizer lays out a prompt without text when the model has no
// T5 tokenizer: T5's special tokens (<pad> 0, </s> 1, <unk> 2) and no other
// piece, which is all ChunkedLayout reads.
func t5FallbackTokenizer() *text.UnigramTokenizer {
	t, err := text.NewUnigramTokenizer(text.UnigramSpec{
		Pieces: []text.UnigramPiece{
			{Text: "<pad>", Type: text.PieceControl},
			{Text: "</s>", Type: text.PieceControl},
			{Text: "<unk>", Type: text.PieceUnknown},
		},
		UnkID: 2, EOSID: 1, BOSID: -1, PadID: 0, AddEOS: true,
	})
	if err != nil {
		panic(err) // a fixed, valid specification
	}
	return t
}

// T5Tokenizer returns the model's T5 tokenizer (nil when none was found:
// then only an empty prompt encodes).
func T5Tokenizer(m *infer.Model) *text.UnigramTokenizer {
	t, _ := m.Tokenizers["t5"].(*text.UnigramTokenizer)
	return t
}

// loadT5KindTokenizer loads the T5 tokenizer (loadT5Tokenizer) and checks
// that the encoder's embedding has a row for each piece.
func loadT5KindTokenizer(opt infer.LoadOptions, srcs []*infer.OpenSource, encs []infer.EncoderConfig, main string) (any, error) {
	tok, err := loadT5Tokenizer(opt.Tokenizers["t5"], srcs)
	if err != nil {
		return nil, err
	}
	for _, e := range encs {
		if c := e.(*T5Config); tok != nil && tok.VocabSize() > c.Vocab {
			return nil, fmt.Errorf("%s: the T5 tokenizer has %d pieces, the T5 encoder's embedding %d rows", main, tok.VocabSize(), c.Vocab)
		}
	}
	return tok, nil
}

// loadT5Tokenizer takes file (--t5-tokenizer) when given, else the unigram
// tokenizer embedded in the metadata of the first component file that has
// one (the --t5xxl file first, then the model's, then any other); nil
// without an error when there is none (an empty prompt still encodes).
func loadT5Tokenizer(file string, srcs []*infer.OpenSource) (*text.UnigramTokenizer, error) {
	if file != "" {
		return text.LoadUnigram(file)
	}
	for _, flag := range []string{"t5xxl", "model", "diffusion-model", "clip_l", "clip_g", "vae"} {
		for _, s := range srcs {
			if s.Comp.Flag != flag {
				continue
			}
			t, err := text.UnigramFromMetadata(s.M.Path(), s.M.Metadata())
			if errors.Is(err, text.ErrNoUnigramTokenizer) {
				continue
			}
			return t, err
		}
	}
	return nil, nil
}

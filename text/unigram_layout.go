package text

// Fixed-length T5 token layouts.
//
// What stable-diffusion.cpp (97d2990) feeds T5, read from src/conditioning/conditioner.hpp and
// src/tokenizers/tokenizer.cpp (Tokenizer::pad_tokens):
//
//   - The prompt is split by parse_prompt_attention (src/core/util.cpp) into (text, weight) runs; each run
//     is encoded on its own (T5UniGramTokenizer::encode, which adds no special tokens) and the ids are
//     concatenated, each id keeping its run's weight. An empty prompt is one empty run.
//   - pad_tokens(tokens, weights, mask, min_length = max_length = L, allow_overflow_expand = true), with
//     add_bos_token false and add_eos_token true for T5 and UMT5, pads on the right with id 0:
//     if len(tokens)+1 <= L the result is tokens, </s> (1), then 0s up to L; otherwise the tokens are cut
//     into chunks of L-1, each chunk followed by </s> and padded to L, and the chunks are concatenated, so
//     nothing is truncated. </s> and the padding get weight 1; the mask is 1 for tokens and </s>, 0 for
//     padding.
//   - The conditioner then runs T5 once per chunk of L and concatenates the hidden states.
//   - L is 256 for Flux, dev and schnell alike (FluxCLIPEmbedder::chunk_len; there is no 512 for dev),
//     77 for SD3 (SD3CLIPEmbedder::get_learned_condition tokenizes with 77, 77 and runs chunks of 77), and
//     512 for Chroma and Wan (T5CLIPEmbedder::chunk_len; Wan's tokenizer is UMT5's).
//
// diffusers and ComfyUI differ: diffusers' Flux pipeline tokenizes with max_sequence_length (512 for dev,
// 256 for schnell), truncating and padding to exactly that length; TruncatedLayout gives that layout.

// T5 chunk lengths of stable-diffusion.cpp 97d2990, from src/conditioning/conditioner.hpp: FluxCLIPEmbedder's
// chunk_len, SD3CLIPEmbedder's 77 and T5CLIPEmbedder's chunk_len.
const (
	// FluxT5Length is the chunk length sd.cpp gives T5 for Flux.1 dev and schnell.
	FluxT5Length = 256
	// SD3T5Length is the chunk length sd.cpp gives T5 for SD3 and SD3.5.
	SD3T5Length = 77
	// ChromaT5Length is the chunk length sd.cpp gives T5 for Chroma and UMT5 for Wan.
	ChromaT5Length = 512
)

// Positions of TokenLayout.Source that do not come from the input ids.
const (
	// LayoutSpecial marks a BOS or EOS token the layout added.
	LayoutSpecial = -1
	// LayoutPadding marks a padding token.
	LayoutPadding = -2
)

// TokenLayout is a fixed-length token sequence for a text encoder.
type TokenLayout struct {
	// IDs are the token ids, a multiple of the chunk length long.
	IDs []int32
	// Source gives, for each position, the index of the input id it holds, or LayoutSpecial or
	// LayoutPadding; a caller with per-token prompt weights looks them up through it (sd.cpp gives
	// special tokens and padding weight 1).
	Source []int
}

// Mask returns the attention mask of the layout: true for tokens and special tokens, false for padding.
func (l TokenLayout) Mask() []bool {
	m := make([]bool, len(l.Source))
	for i, s := range l.Source {
		m[i] = s != LayoutPadding
	}
	return m
}

// ChunkedLayout lays piece ids out as stable-diffusion.cpp's Tokenizer::pad_tokens does for T5
// (src/tokenizers/tokenizer.cpp, called with min and max length chunkLen and overflow expansion): each
// chunk of at most chunkLen-1 ids (fewer when the model also adds BOS) followed by the model's EOS and
// padded to chunkLen, the chunks one after the other; no ids means one chunk holding only the special
// tokens and padding. The padding id is the model's <pad> (0 when it has none). A chunkLen too small to
// hold the special tokens and one id gives one unpadded sequence.
func (t *UnigramTokenizer) ChunkedLayout(ids []int32, chunkLen int) TokenLayout {
	per := chunkLen - t.specialCount()
	if per < 1 {
		var l TokenLayout
		t.appendSequence(&l, ids, 0, 0)
		return l
	}
	var l TokenLayout
	if len(ids) == 0 {
		t.appendSequence(&l, nil, 0, chunkLen)
		return l
	}
	for off := 0; off < len(ids); off += per {
		end := min(off+per, len(ids))
		t.appendSequence(&l, ids[off:end], off, chunkLen)
	}
	return l
}

// TruncatedLayout lays piece ids out as Hugging Face tokenizers do with truncation and padding to
// max_length (diffusers' Flux and SD3 pipelines): the ids cut to what fits beside the special tokens,
// the special tokens added, and padding up to length.
func (t *UnigramTokenizer) TruncatedLayout(ids []int32, length int) TokenLayout {
	keep := max(0, min(len(ids), length-t.specialCount()))
	var l TokenLayout
	t.appendSequence(&l, ids[:keep], 0, length)
	if len(l.IDs) > length { // length too small even for the special tokens
		l.IDs, l.Source = l.IDs[:max(length, 0)], l.Source[:max(length, 0)]
	}
	return l
}

// EncodeChunked encodes text and lays it out with ChunkedLayout.
func (t *UnigramTokenizer) EncodeChunked(text string, chunkLen int) []int32 {
	return t.ChunkedLayout(t.Tokenize(text), chunkLen).IDs
}

// EncodeTruncated encodes text and lays it out with TruncatedLayout.
func (t *UnigramTokenizer) EncodeTruncated(text string, length int) []int32 {
	return t.TruncatedLayout(t.Tokenize(text), length).IDs
}

// specialCount is how many special tokens Encode adds around the pieces.
func (t *UnigramTokenizer) specialCount() int {
	n := 0
	if t.spec.AddBOS {
		n++
	}
	if t.spec.AddEOS {
		n++
	}
	return n
}

// appendSequence appends [BOS] ids [EOS] padded to length; first is the index of ids[0] in the input.
func (t *UnigramTokenizer) appendSequence(l *TokenLayout, ids []int32, first, length int) {
	start := len(l.IDs)
	if t.spec.AddBOS {
		l.IDs = append(l.IDs, t.spec.BOSID)
		l.Source = append(l.Source, LayoutSpecial)
	}
	for i, id := range ids {
		l.IDs = append(l.IDs, id)
		l.Source = append(l.Source, first+i)
	}
	if t.spec.AddEOS {
		l.IDs = append(l.IDs, t.spec.EOSID)
		l.Source = append(l.Source, LayoutSpecial)
	}
	pad := max(t.spec.PadID, 0)
	for len(l.IDs)-start < length {
		l.IDs = append(l.IDs, pad)
		l.Source = append(l.Source, LayoutPadding)
	}
}

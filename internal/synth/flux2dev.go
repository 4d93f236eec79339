package synth

import (
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/text"
)

// Mistral24B is Flux.2 dev's text encoder, Mistral Small 3.x, at its real
// widths (5120, 32 query and 8 key/value heads of 128, MLP 32768, 131072
// tokens) two layers deep and q8_0 (about 1.9 GB, most of it the two MLPs
// and the embedding).
var Mistral24B = LLM{Mistral: true, Hidden: 5120, FF: 32768, Layers: 2, Heads: 32, KVHeads: 8, HeadDim: 128,
	Vocab: 131072, Seed: 13, Type: formats.F32, Quant: formats.Q8_0}

// DevParity is the Flux.2 dev of the sd-cli comparisons. sd.cpp tells dev
// from klein by single_blocks.47 alone and then reads every single block
// it numbers, so the DiT is as deep as dev (one double block, 48 single
// ones) but narrow: 384 wide, 3 heads of 128 (sd.cpp fixes the RoPE axes
// at 32 × 4), gated MLP 1152, with dev's guidance embedding; txt_in takes
// 5120, the final norm of Mistral24B (two layers have no layers 10, 20,
// 30); the VAE's decoder is 32 wide. The DiT is f16, not q8_0: through 49
// blocks of random weights, q8_0's rounding of the activations turns any
// difference in the last bits (a context perturbed by 1e-4 relative) into
// an image about 45 dB away from the unperturbed one, a floor below the
// 50 dB the comparison asks for.
var DevParity = Flux2{
	Hidden: 384, Heads: 3, MLP: 1152, Double: 1, Single: 48, Context: 5120, Guidance: true,
	LLM:   Mistral24B,
	VAECh: 128, VAEDecCh: 32, VAEMult: []int{1, 2, 4, 4},
	Seed: 31, Type: formats.F16, Width: 128, Height: 128, Steps: 4,
}

// TinyDev is testdata/tiny-flux2-dev.gguf: a 32-wide DiT (one head, RoPE
// axes 8 8 8 8, gated MLP 96) with one double and dev's 48 single blocks
// and a guidance embedding, a 64-wide two-layer Mistral (two query heads
// and one key/value head of 128, the width sd.cpp assumes and no q_norm
// tells) over a small Tekken-split vocabulary embedded in the file, and a
// 32-wide VAE; f16
// with q8_0 DiT matrices, 128x128 images in 4 steps by default.
var TinyDev = Flux2{
	Hidden: 32, Heads: 1, MLP: 96, Double: 1, Single: 48, Context: 64, Axes: "8,8,8,8", Guidance: true,
	LLM: LLM{Mistral: true, Hidden: 64, FF: 128, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 128,
		Vocab: len(devVocab(DefaultWords).Tokens), Seed: 32, Type: formats.F16, Tokenizer: devVocab(DefaultWords)},
	VAECh: 32, VAEMult: []int{1, 1, 1, 1},
	Seed: 32, Type: formats.F16, Quant: formats.Q8_0, Width: 128, Height: 128, Steps: 4,
}

// mistralControl are the control tokens Flux.2 dev's template uses, with
// Mistral's unknown token first.
var mistralControl = []string{"<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"}

// devVocab is kleinVocab's words under Tekken's split, with Mistral's
// control tokens in front (ids 0-6) as Mistral numbers its own.
func devVocab(words []string) *text.ByteBPEVocab {
	k := kleinVocab(words)
	n := len(k.Tokens) - 5 // kleinVocab ends with Qwen's five control tokens
	v := &text.ByteBPEVocab{Pre: text.PreTekken, Merges: k.Merges}
	for _, s := range mistralControl {
		v.Tokens, v.Types = append(v.Tokens, s), append(v.Types, text.TokenControl)
	}
	v.Tokens, v.Types = append(v.Tokens, k.Tokens[:n]...), append(v.Types, k.Types[:n]...)
	return v
}

// MistralUnkVocab is a vocabulary that tokenizes as sd-cli does with a stub
// Mistral vocabulary (no tokens, no merges): <unk> (0) and <s> (1), the 256
// byte symbols, so that every byte of a prompt is one token, and Mistral's
// control tokens as single tokens. Its one merge joins bytes 0x00 and 0x01,
// which no prompt holds: GGUF readers (llama.cpp's, sdtool's) want a
// byte-level vocabulary to have merges. With LLM.UnkRowsFrom 2
// every one of those tokens reads row 0, as every id sd-cli gives but BOS
// is 0: both sides then see the same embeddings, token for token, for any
// prompt.
func MistralUnkVocab() *text.ByteBPEVocab {
	v := &text.ByteBPEVocab{Pre: text.PreTekken}
	add := func(s string, typ int32) { v.Tokens, v.Types = append(v.Tokens, s), append(v.Types, typ) }
	add("<unk>", text.TokenControl)
	add("<s>", text.TokenControl)
	k := kleinVocab(nil)
	for _, s := range k.Tokens[:256] {
		add(s, text.TokenNormal)
	}
	for _, s := range mistralControl[2:] {
		add(s, text.TokenControl)
	}
	v.Merges = []string{k.Tokens[0] + " " + k.Tokens[1]}
	add(k.Tokens[0]+k.Tokens[1], text.TokenNormal)
	return v
}

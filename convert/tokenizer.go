package convert

import (
	"fmt"
	"os"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/text"
)

// embedded is a tokenizer read for --tokenizer, as the metadata that
// carries it.
type embedded struct {
	// Meta are the entries: CLIP's merges under text.CLIPMergesKey, or a
	// unigram vocabulary under llama.cpp's tokenizer.ggml.* keys.
	Meta formats.Metadata
	// What describes it for the summary ("CLIP BPE, 48894 merges").
	What string
	// Replaces are key prefixes whose carried entries this tokenizer
	// replaces whole (a unigram vocabulary's optional keys included).
	Replaces []string
}

// apply returns md with the tokenizer's entries in place of the ones it replaces.
func (e embedded) apply(md formats.Metadata) formats.Metadata {
	out := md[:0:0]
	for _, kv := range md {
		if !hasAnyPrefix(kv.Key, e.Replaces) {
			out = append(out, kv)
		}
	}
	for _, kv := range e.Meta {
		out = pipeline.SetMetadata(out, kv)
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// loadTokenizer reads the tokenizer at path (a CLIP tokenizer.json,
// vocab.json with merges.txt or a merges file, a SentencePiece model or a
// unigram tokenizer.json, an LLM's byte-level BPE tokenizer.json or
// vocab.json with merges.txt, or a folder holding one) for an output in
// format: CLIP's is one string, a unigram vocabulary GGUF arrays (stored
// in safetensors as their typed text, which the safetensors reader turns
// back into arrays). text, below convert on the package
// map, does the reading and the encoding, so that what convert embeds is
// exactly what generate reads.
func loadTokenizer(path, format string) (embedded, error) {
	if _, err := os.Stat(path); err != nil {
		return embedded{}, option.Errorf("%s: %w", option.Name("Tokenizers"), err)
	}
	clip, clipErr := text.LoadCLIPTokenizer(path)
	if clipErr == nil {
		kv, err := clip.MetadataKV()
		if err != nil {
			return embedded{}, option.Errorf("%s %s: %w", option.Name("Tokenizers"), path, err)
		}
		return embedded{Meta: formats.Metadata{kv}, What: fmt.Sprintf("CLIP BPE tokenizer (%d merges) under %s", len(clip.Merges()), text.CLIPMergesKey)}, nil
	}
	uni, uniErr := text.LoadUnigram(path)
	if uniErr == nil {
		meta := uni.GGUFMetadata()
		if format == "safetensors" {
			// Arrays as their typed text, numbers and flags as decimal text: the readers take both.
			var dropped []pipeline.DroppedKey
			if meta, dropped = pipeline.CarryMetadata(meta, format); len(dropped) > 0 {
				return embedded{}, option.Errorf("%s %s: metadata %s: %s", option.Name("Tokenizers"), path, dropped[0].Key, dropped[0].Reason)
			}
		}
		return embedded{Meta: meta, What: fmt.Sprintf("SentencePiece unigram tokenizer (%d pieces) under tokenizer.ggml.*", uni.VocabSize()),
			Replaces: []string{"tokenizer.ggml.", "sdtool.tokenizer.unigram."}}, nil
	}
	bpe, bpeErr := text.LoadByteBPE(path)
	if bpeErr == nil {
		meta := bpe.GGUFMetadata()
		if format == "safetensors" {
			var dropped []pipeline.DroppedKey
			if meta, dropped = pipeline.CarryMetadata(meta, format); len(dropped) > 0 {
				return embedded{}, option.Errorf("%s %s: metadata %s: %s", option.Name("Tokenizers"), path, dropped[0].Key, dropped[0].Reason)
			}
		}
		return embedded{Meta: meta, What: fmt.Sprintf("byte-level BPE tokenizer (%d tokens, %d merges) under tokenizer.ggml.*", len(bpe.Tokens), len(bpe.Merges)),
			Replaces: []string{"tokenizer.ggml.", "sdtool.tokenizer.unigram."}}, nil
	}
	return embedded{}, option.Errorf("%s %s: not a CLIP tokenizer (%v), a SentencePiece one (%v) nor a byte-level BPE one (%v)", option.Name("Tokenizers"), path, clipErr, uniErr, bpeErr)
}

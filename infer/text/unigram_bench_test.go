package text

import (
	"strings"
	"testing"
)

// benchPrompt is a long Flux-style prompt (about 80 T5 tokens).
const benchPrompt = "A cinematic photograph of a red fox sitting in a snowy birch forest at dawn, soft golden light " +
	"through the trees, shallow depth of field, 85mm lens, highly detailed fur, frost on the branches, " +
	"breath visible in the cold air, muted colour palette, award-winning wildlife photography"

func BenchmarkUnigramEncodeT5(b *testing.B) {
	tok := t5Tokenizer(b)
	b.SetBytes(int64(len(benchPrompt)))
	b.ReportAllocs()
	for b.Loop() {
		tok.EncodeChunked(benchPrompt, FluxT5Length)
	}
}

func BenchmarkUnigramEncodeT5Long(b *testing.B) {
	tok := t5Tokenizer(b)
	text := strings.Repeat(benchPrompt+" ", 20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Tokenize(text)
	}
}

func BenchmarkParseSentencePieceModelT5(b *testing.B) {
	data := t5SpieceBytes(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSentencePieceModel("t5", data); err != nil {
			b.Fatal(err)
		}
	}
}

package text

import (
	"os"
	"strings"
	"testing"
	"time"
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

// BenchmarkUnigramVsSPMEncode reports sdtool's time per prompt over SentencePiece's own (spm_encode, Debian's
// sentencepiece package) on the same 2,000 prompts, alternating the two in each iteration; spm_encode's start-up
// (loading the model) is measured on one prompt and subtracted. Skipped when spm_encode is not installed.
func BenchmarkUnigramVsSPMEncode(b *testing.B) {
	spmEncode := lookPath("spm_encode")
	if spmEncode == "" {
		b.Skip("spm_encode not installed")
	}
	tok := t5Tokenizer(b)
	model := b.TempDir() + "/spiece.model"
	if err := os.WriteFile(model, t5SpieceBytes(b), 0o644); err != nil {
		b.Fatal(err)
	}
	lines := make([]string, 2000)
	for i := range lines {
		lines[i] = benchPrompt
	}
	var ours, theirs time.Duration
	for b.Loop() {
		t0 := time.Now()
		for _, l := range lines {
			tok.Tokenize(l)
		}
		t1 := time.Now()
		if _, err := runSPMEncode(spmEncode, model, lines); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := runSPMEncode(spmEncode, model, lines[:1]); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		ours += t1.Sub(t0)
		theirs += t2.Sub(t1) - t3.Sub(t2)
	}
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N*len(lines)), "sdtool-ns/prompt")
	b.ReportMetric(float64(theirs.Nanoseconds())/float64(b.N*len(lines)), "spm-ns/prompt")
	b.ReportMetric(float64(ours)/float64(theirs), "sdtool/spm")
}

package text

import "testing"

// maxFuzzText bounds the texts FuzzEncode and FuzzUnigramEncode encode.
// Encoding costs a microsecond or so a byte and the fuzzer minimizes every
// new input with O(n²) calls, so texts of kilobytes kept both workers
// minimizing for most of a minute (18k-42k executions a minute); loop
// coverage stops growing at 128 iterations, so longer texts reach no
// state that these cannot. Long prompts have their own tests (chunks,
// truncation).
const maxFuzzText = 256

func FuzzEncode(f *testing.F) {
	for _, s := range []string{"a photo of a cat", "it's 12 o'clock!!", "é\x01\xff<|endoftext|>", "  \t\u3000x", "CAT"} {
		f.Add(s)
	}
	tok := tinyTokenizer(f)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > maxFuzzText {
			return
		}
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("id %d out of range", id)
			}
		}
		// Encoding is a pure function of the text, and padding frames it exactly.
		if again := tok.Encode(s); len(again) != len(ids) {
			t.Fatalf("not deterministic: %v vs %v", ids, again)
		}
		p := tok.EncodePadded(s, 16, 0)
		if len(p) != 16 || p[0] != tok.BOS() {
			t.Fatalf("padded: %v", p)
		}
		if n := min(len(ids), 14); p[n+1] != tok.EOS() {
			t.Fatalf("EOS not after the text: %v (ids %v)", p, ids)
		}
	})
}

func FuzzTokenizerFiles(f *testing.F) {
	f.Add(tinyMerges, `{"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]}}`)
	f.Add("a b\nab c\n", `{"model":{"vocab":{"a":0},"merges":[["a","b"]]}}`)
	f.Fuzz(func(t *testing.T, merges, js string) {
		if m, err := ParseMerges("m", merges); err == nil {
			if tok, err := NewCLIPTokenizerFromMerges(m); err == nil {
				tok.EncodePadded(merges, 8, 0)
			}
		}
		if tok, err := ParseCLIPTokenizerJSON("t.json", []byte(js)); err == nil {
			tok.EncodePadded(js, 8, 0)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	tok := realTokenizer(b)
	prompt := "masterpiece, best quality, a photograph of an astronaut riding a horse on mars, highly detailed, 4k, trending on artstation"
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tok.EncodePadded(prompt, CLIPMaxLength, SD1PadID)
		}
	})
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tok.mu.Lock()
			clear(tok.cache)
			tok.mu.Unlock()
			tok.EncodePadded(prompt, CLIPMaxLength, SD1PadID)
		}
	})
}

func BenchmarkLoadMerges(b *testing.B) {
	realTokenizer(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadCLIPTokenizer(sharedMerges); err != nil {
			b.Fatal(err)
		}
	}
}

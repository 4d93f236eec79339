package synth

import (
	"bytes"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/text"
)

// TestQwenImageParts: each component is detected as the family its flag
// names, the tiny model's single file stays under 3 MB, and its embedded
// tokenizer loads and covers the embedding's rows.
func TestQwenImageParts(t *testing.T) {
	want := map[string]string{"diffusion-model": "qwen_image", "llm": "qwen2.5vl", "vae": "wan_vae"}
	for _, flag := range QwenImageParts {
		var ts []formats.Tensor
		for _, s := range TinyQwenImage.Part(flag) {
			ts = append(ts, formats.Tensor{Name: s.Name, Shape: s.Shape})
		}
		if got := family.Detect(ts, TinyQwenImage.Metadata(flag)).Name; got != want[flag] && !(flag == "llm" && got == "llm") {
			t.Errorf("%s: detected %q, want %q", flag, got, want[flag])
		}
	}
	var buf bytes.Buffer
	if err := TinyQwenImage.EncodeSingle(&buf, "gguf"); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > 3<<20 {
		t.Errorf("tiny single file is %d bytes, over 3 MB", buf.Len())
	}
	m, err := gguf.Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := text.ByteBPEFromMetadata("tiny", m.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != TinyQwenImage.vocab() {
		t.Errorf("tokenizer has %d ids, the embedding %d rows", tok.VocabSize(), TinyQwenImage.vocab())
	}
	ids := tok.Encode("<|im_start|>user\na cat 猫<|im_end|>")
	if len(ids) == 0 || ids[0] != int32(TinyQwenImage.vocab()-2) {
		t.Errorf("ids %v: want <|im_start|> (%d) first", ids, TinyQwenImage.vocab()-2)
	}
}

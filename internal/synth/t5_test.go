package synth

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/text"
)

func TestT5Namings(t *testing.T) {
	hf, err := TinyT5.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	// Seven linear weights and two norms per block, the bias table once, the embedding and the final norm.
	if want := 9*TinyT5.Layers + 3; len(hf) != want {
		t.Fatalf("%d tensors, want %d", len(hf), want)
	}
	for _, c := range []struct{ naming, prefix string }{{T5Comfy, "text_encoders.t5xxl.transformer."}, {T5GGUF, ""}} {
		ts, err := TinyT5.withNaming(c.naming).Tensors()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i, ts := range ts {
			if seen[ts.Name] {
				t.Errorf("%s: %s twice", c.naming, ts.Name)
			}
			seen[ts.Name] = true
			if !slices.Equal(ts.Shape, hf[i].Shape) {
				t.Errorf("%s: %s has shape %v, HF's %v", c.naming, ts.Name, ts.Shape, hf[i].Shape)
			}
			switch c.naming {
			case T5Comfy:
				if ts.Name != c.prefix+hf[i].Name {
					t.Errorf("%s: %s for %s", c.naming, ts.Name, hf[i].Name)
				}
			case T5GGUF:
				if !strings.HasPrefix(ts.Name, "enc.") && ts.Name != "token_embd.weight" || strings.Contains(ts.Name, "layer.") {
					t.Errorf("%s: %s is not a llama.cpp name (from %s)", c.naming, ts.Name, hf[i].Name)
				}
			}
		}
	}
	if _, err := TinyT5.withNaming("ldm").Tensors(); err == nil {
		t.Error("an unknown naming: no error")
	}
	bad := TinyT5
	bad.HeadDim = 0
	if _, err := bad.Tensors(); err == nil {
		t.Error("a zero head width: no error")
	}
}

// The GGUF carries the tokenizer, which reads back with T5's special ids
// and spells the word list whole.
func TestT5TokenizerInGGUF(t *testing.T) {
	var buf bytes.Buffer
	c := TinyT5.withNaming(T5GGUF)
	if err := c.EncodeAs(&buf, "gguf"); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "tiny t5")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := text.UnigramFromMetadata("tiny t5", f.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	if tok.PadID() != 0 || tok.EOSID() != 1 || tok.UnkID() != 2 {
		t.Errorf("special ids pad %d eos %d unk %d, want 0 1 2", tok.PadID(), tok.EOSID(), tok.UnkID())
	}
	ids := tok.Encode("a red cat")
	if len(ids) != 4 || ids[3] != 1 {
		t.Fatalf("ids %v, want three words and </s>", ids)
	}
	for i, w := range []string{"▁a", "▁red", "▁cat"} {
		if tok.Piece(ids[i]) != w {
			t.Errorf("piece %d is %q, want %q", i, tok.Piece(ids[i]), w)
		}
	}
	if ids := tok.Tokenize("zebra"); len(ids) < 2 {
		t.Errorf("an unknown word is spelled by %v", ids)
	}
}

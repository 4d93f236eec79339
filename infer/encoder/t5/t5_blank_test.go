package t5

import (
	"slices"
	"testing"
)

// A blank prompt is the empty prompt for T5 (its SentencePiece normalizer
// drops whitespace-only text): without a T5 vocabulary both lay out as
// </s> and padding, as sd-cli's do, while text still needs the vocabulary.
func TestT5LayoutBlankPrompt(t *testing.T) {
	const chunk = 16
	empty, _, err := t5Layout(nil, "", chunk)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int32, chunk)
	want[0] = 1 // </s>
	if !slices.Equal(empty.IDs, want) {
		t.Fatalf("empty prompt: %v, want </s> and padding %v", empty.IDs, want)
	}
	for _, p := range []string{" ", "   ", "\t\n", "( :1.2)"} {
		l, w, err := t5Layout(nil, p, chunk)
		if err != nil {
			t.Errorf("%q without a T5 tokenizer: %v", p, err)
			continue
		}
		if !slices.Equal(l.IDs, want) || len(w) != chunk {
			t.Errorf("%q: ids %v, want the empty prompt's %v", p, l.IDs, want)
		}
	}
	if _, _, err := t5Layout(nil, " a cat ", chunk); err == nil {
		t.Error("a prompt with text and no T5 tokenizer: no error")
	}
}

package option

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func flag(n Name) string { return "--" + strings.ToLower(strings.ReplaceAll(string(n), ".", "-")) }

func TestErrorNamesOptions(t *testing.T) {
	base := errors.New("unknown type \"q9\"")
	e := Errorf("%s: %w (with %s)", Name("Type"), base, Name("Budget.BPW"))
	if got, want := e.Error(), `Type: unknown type "q9" (with Budget.BPW)`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, base) {
		t.Error("the wrapped error is lost")
	}
	var oe *Error
	if !errors.As(e, &oe) || fmt.Sprint(oe.Names()) != "[Type Budget.BPW]" {
		t.Errorf("Names = %v", oe.Names())
	}
	if got, want := Phrase(e, flag), `--type: unknown type "q9" (with --budget-bpw)`; got != want {
		t.Errorf("Phrase = %q, want %q", got, want)
	}
}

// Wrappers keep their text; nested and joined option errors are each
// phrased; an error with no options reads as it is.
func TestPhraseTree(t *testing.T) {
	inner := Errorf("%s %d is negative", Name("MaxRank"), -2)
	outer := fmt.Errorf("model.safetensors: %w", Errorf("%s: %w", Name("Type"), inner))
	joined := errors.Join(outer, Errorf("give %s or %s", Name("Rank"), Name("Energy")), errors.New("plain --kept"))
	got := Phrase(joined, flag)
	want := "model.safetensors: --type: --maxrank -2 is negative\ngive --rank or --energy\nplain --kept"
	if got != want {
		t.Errorf("Phrase = %q, want %q", got, want)
	}
	plain := errors.New("Type: stays")
	if Phrase(plain, flag) != "Type: stays" {
		t.Error("an error without options was rewritten")
	}
}

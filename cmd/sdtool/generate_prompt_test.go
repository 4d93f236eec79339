//go:build cgo

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer/pngtext"
)

// An empty prompt renders, as in sd-cli (common with Flux, and the way to
// compare with sd-cli builds that lack T5's vocabulary); only a missing -p
// is refused.
func TestGenerateEmptyPrompt(t *testing.T) {
	dir := t.TempDir()
	// Flux, whose T5 takes the empty prompt as </s> alone; SD's CLIP encodes
	// "" on every CFG run, as the empty negative prompt.
	for _, model := range []string{"../../testdata/tiny-flux.gguf"} {
		out := filepath.Join(dir, filepath.Base(model)+".png")
		code, _, errOut := runApp(t, "generate", "-m", model, "-p", "", "--steps", "1", "-W", "64", "-H", "64", "-t", "1", "-o", out)
		if code != 0 {
			t.Fatalf("%s -p '': exit %d: %s", model, code, errOut)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		text, err := pngtext.Read(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if p := text[pngtext.ParametersKey]; !strings.HasPrefix(p, "\nSteps: 1") {
			t.Errorf("%s: parameters %q do not start with the empty prompt", model, p)
		}
	}
	code, _, errOut := runApp(t, "generate", "-m", tinyGGUF, "-o", filepath.Join(dir, "none.png"))
	if code != 1 || !strings.Contains(errOut, "give --prompt (-p) or --prompt-file") {
		t.Errorf("no -p: exit %d, %q", code, errOut)
	}
}

// Without -o, generate writes output.png as sd-cli does: an existing one
// is refused on one line, before any work, with no help text.
func TestGenerateDefaultOutput(t *testing.T) {
	model, err := filepath.Abs(tinyGGUF)
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	os.WriteFile("output.png", []byte("keep"), 0o644)
	code, stdout, errOut := runApp(t, "generate", "-m", model, "-p", "a cat")
	if code != 1 || stdout != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "output.png") {
		t.Errorf("exit %d, stdout %q, stderr %q; want one line naming output.png", code, stdout, errOut)
	}
	if code, out, _ := runApp(t, "generate", "--help"); code != 0 || !strings.Contains(out, `(default: "output.png")`) {
		t.Errorf("--help does not give the default output:\n%s", out)
	}
}

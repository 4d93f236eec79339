//go:build cgo

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/synth"
)

// A Flux diffusion model alone given as -m: generate names the family as
// inspect does and the flags of the parts still missing.
func TestGenerateBareDiffusionModelNamesMissingParts(t *testing.T) {
	dir := t.TempDir()
	dit := filepath.Join(dir, "flux-dit.gguf")
	if err := synth.Write(dit, synth.Spec{Arch: "flux", Scale: 1.0 / 32, Depth: 1}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x.png")
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{nil, "is a Flux.1 dev diffusion model alone (no text encoders, no VAE): give it as --diffusion-model " + dit +
			" with --clip_l FILE --t5xxl FILE --vae FILE"},
		{[]string{"--clip_l", "../../testdata/tiny-flux.gguf"}, "--diffusion-model " + dit + " with --t5xxl FILE --vae FILE"},
	} {
		code, _, errOut := runApp(t, append([]string{"generate", "-m", dit, "-p", "a cat", "-o", out}, c.extra...)...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "no a ") {
			t.Errorf("%q: exit %d, %q; want %q", c.extra, code, errOut, c.want)
		}
	}
}

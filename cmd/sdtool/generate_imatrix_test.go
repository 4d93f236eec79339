//go:build cgo

package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/infer/pngtext"
	"github.com/sdtool/sdtool/quant/imatrix"
)

// tinyArgs are the settings every imatrix run here shares (one step, 64x64).
var tinyArgs = []string{"generate", "-m", tinyGGUF, "--steps", "1", "-W", "64", "-H", "64", "-t", "1", "-n", "blurry"}

func genImatrix(t *testing.T, args ...string) string {
	t.Helper()
	code, _, errOut := runApp(t, append(append([]string{}, tinyArgs...), args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	return errOut
}

func TestGenerateImatrixPromptFile(t *testing.T) {
	longtest.Skip(t, "an importance matrix over a prompt file")
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.txt")
	if err := os.WriteFile(prompts, []byte("a cat\n\na red house\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.png")
	both := filepath.Join(dir, "both.dat")
	if msg := genImatrix(t, "--prompt-file", prompts, "-o", out, "--imat-out", both); !strings.Contains(msg, "write .gguf to keep them") {
		t.Errorf("the .dat output does not say that it keeps no activation maxima: %s", msg)
	}

	// One image per prompt, seeds 42 and 43.
	for i, want := range []string{"a cat\n", "a red house\n"} {
		b, err := os.ReadFile(filepath.Join(dir, []string{"img-1.png", "img-2.png"}[i]))
		if err != nil {
			t.Fatal(err)
		}
		text, err := pngtext.Read(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		p := text[pngtext.ParametersKey]
		if !strings.HasPrefix(p, want) || !strings.Contains(p, []string{"Seed: 42", "Seed: 43"}[i]) {
			t.Errorf("image %d: parameters %q", i+1, p)
		}
	}

	// The .dat file: two prompts x one step x two UNet passes (CFG).
	m, err := imatrix.Open(both)
	if err != nil {
		t.Fatal(err)
	}
	name := "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"
	e, ok := m.Lookup(name)
	if !ok || e.NCall != 4 || len(e.Sum2) != 32 {
		t.Fatalf("entry %s: %+v", name, e)
	}
	if len(m.Datasets) != 1 || m.Datasets[0] != prompts {
		t.Errorf("datasets %q", m.Datasets)
	}

	// Continuing: the first prompt to GGUF, then the second prompt (seed
	// 43) from it, equals the one run over both prompts.
	first := filepath.Join(dir, "first.gguf")
	if msg := genImatrix(t, "-p", "a cat", "-o", filepath.Join(dir, "a.png"), "--imatrix-out", first); !strings.Contains(msg, "64 bytes or longer") {
		t.Errorf("no long-name warning for GGUF: %q", msg)
	}
	g, err := imatrix.Open(first)
	if err != nil {
		t.Fatal(err)
	}
	if ge, ok := g.Lookup(name); !ok || ge.Counts[0] != 2*64 {
		t.Fatalf("GGUF entry %s: %+v (want 128 rows: 8x8 latent, two passes)", name, ge)
	}
	cont := filepath.Join(dir, "cont.dat")
	genImatrix(t, "-p", "a red house", "--seed", "43", "-o", filepath.Join(dir, "b.png"), "--imatrix-in", first, "--imatrix-out", cont)
	c, err := imatrix.Open(cont)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Entries) != len(m.Entries) {
		t.Fatalf("%d entries continued, %d in one run", len(c.Entries), len(m.Entries))
	}
	for _, want := range m.Entries {
		got, ok := c.Lookup(want.Name)
		if !ok || got.NCall != want.NCall {
			t.Fatalf("%s: continued %+v, one run %d calls", want.Name, got, want.NCall)
		}
		for j, v := range want.Sum2 {
			if d := math.Abs(float64(got.Sum2[j] - v)); d > 1e-5*math.Abs(float64(v))+1e-7 {
				t.Fatalf("%s[%d]: continued %v, one run %v", want.Name, j, got.Sum2[j], v)
			}
		}
	}
	// The continued file can be continued into itself.
	genImatrix(t, "-p", "a dog", "-o", filepath.Join(dir, "d.png"), "--imatrix-in", cont, "--imatrix-out", cont)
	if c2, err := imatrix.Open(cont); err != nil {
		t.Fatal(err)
	} else if e2, _ := c2.Lookup(name); e2.NCall != 6 {
		t.Errorf("after a third prompt %d calls, want 6", e2.NCall)
	}
}

func TestGenerateImatrixErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.png")
	prompts := filepath.Join(dir, "p.txt")
	os.WriteFile(prompts, []byte("a\n"), 0o644)
	existing := filepath.Join(dir, "old.dat")
	os.WriteFile(existing, []byte("x"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-p", "a", "--imatrix-in", existing}, "needs --imatrix-out"},
		{[]string{"-p", "a", "--imatrix-out", existing}, "exists"},
		{[]string{"-p", "a", "--imatrix-out", filepath.Join(dir, "n.dat"), "--imatrix-in", existing}, existing},
		{[]string{"--prompt-file", prompts, "--compare", tinyGGUF}, "--compare"},
		{[]string{"--prompt-file", filepath.Join(dir, "missing.txt")}, "missing.txt"},
		{nil, "--prompt-file"},
	} {
		code, _, errOut := runApp(t, append(append(append([]string{}, tinyArgs...), "-o", out), c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q (want an error naming %q)", c.args, code, errOut, c.want)
		}
	}
}

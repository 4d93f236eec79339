//go:build cgo

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// --max-memory too small for two of the largest block is refused, naming
// the block and the flag; a bad size is refused before anything loads.
func TestGenerateMaxMemory(t *testing.T) {
	out := filepath.Join(t.TempDir(), "a.png")
	for _, tc := range []struct {
		size string
		want []string
	}{
		{"64KiB", []string{"tiny-sd1.gguf", `block "`, "give --max-memory"}},
		{"2G", []string{"--max-memory", "2GiB"}},
	} {
		code, _, errOut := runApp(t, "generate", "-m", tinyGGUF, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64",
			"-t", "1", "--max-memory", tc.size, "-o", out)
		if code != 1 {
			t.Errorf("--max-memory %s: exit %d, want 1", tc.size, code)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("--max-memory %s: %q lacks %q", tc.size, errOut, w)
			}
		}
	}
}

// The summary line says what was resident and, within a budget that
// holds only part of a graph's weights (the VAE's, beside its 64x64
// compute buffer), what was streamed.
func TestGenerateStreamSummary(t *testing.T) {
	out := filepath.Join(t.TempDir(), "a.png")
	code, _, errOut := runApp(t, "generate", "-m", tinyGGUF, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64",
		"--cfg-scale", "1", "-t", "1", "--max-memory", "4.25MiB", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"resident", "streamed", "blocks", "within 4.25 MiB", "peak RSS"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("summary %q lacks %q", errOut, w)
		}
	}
}

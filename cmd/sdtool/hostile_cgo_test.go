//go:build cgo

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerateOutputsNeverReplaceInputs: generate's image and imatrix
// outputs refuse every file it reads, and a symlink planted at the image's
// .partial (or the imatrix's) is replaced, not written through (issue 14,
// items 5 and 6).
func TestGenerateOutputsNeverReplaceInputs(t *testing.T) {
	dir := t.TempDir()
	model := copyTo(t, tinyGGUF, dir, "model.gguf")
	orig, _ := os.ReadFile(model)
	args := []string{"generate", "-m", model, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64", "-t", "1", "--force"}
	for _, extra := range [][]string{
		{"-o", filepath.Join(dir, "a.png"), "--imatrix-out", model},
		{"-o", filepath.Join(dir, "a.png"), "--imatrix-out", filepath.Join(dir, "a.png")},
	} {
		code, _, errOut := runApp(t, append(append([]string{}, args...), extra...)...)
		// The image and the imatrix naming one file are two outputs of one
		// file (issue 35, item 1 says so in those words).
		if code == 0 || !strings.Contains(errOut, "refusing to write over input") && !strings.Contains(errOut, "named by both --output and --imatrix-out") {
			t.Errorf("%v: exit %d: %s", extra, code, errOut)
		}
		unchanged(t, model, orig)
	}
	victim := copyTo(t, model, dir, "victim.bin")
	out := filepath.Join(dir, "b.png")
	if err := os.Symlink(victim, out+".partial"); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runApp(t, append(append([]string{}, args...), "-o", out)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	unchanged(t, victim, orig)
	if st, err := os.Lstat(out); err != nil || !st.Mode().IsRegular() {
		t.Errorf("%s is not a regular file: %v", out, err)
	}
	// The same for the imatrix output: a planted link to the model is
	// refused as the input itself, a link to any other file is replaced.
	im := filepath.Join(dir, "im.gguf")
	if err := os.Symlink(model, im+".partial"); err != nil {
		t.Fatal(err)
	}
	imArgs := append(append([]string{}, args...), "-o", filepath.Join(dir, "c.png"), "--imatrix-out", im)
	if code, _, errOut := runApp(t, imArgs...); code == 0 || !strings.Contains(errOut, "which is input") {
		t.Errorf("imatrix .partial linked to the model: exit %d: %s", code, errOut)
	}
	unchanged(t, model, orig)
	os.Remove(im + ".partial")
	if err := os.Symlink(victim, im+".partial"); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runApp(t, imArgs...); code != 0 {
		t.Fatalf("imatrix .partial linked to another file: exit %d: %s", code, errOut)
	}
	unchanged(t, victim, orig)
	unchanged(t, model, orig)
	if st, err := os.Lstat(im); err != nil || !st.Mode().IsRegular() {
		t.Errorf("%s is not a regular file: %v", im, err)
	}
}

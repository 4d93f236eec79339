//go:build !cgo

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// Without cgo, generate exists and says why it cannot run.
func TestGenerateWithoutCgo(t *testing.T) {
	code, _, errOut := runApp(t, "generate", "-m", "../../testdata/tiny-sd1.gguf", "-p", "a cat", "-o", filepath.Join(t.TempDir(), "c.png"))
	if code != 1 || !strings.Contains(errOut, "without cgo") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

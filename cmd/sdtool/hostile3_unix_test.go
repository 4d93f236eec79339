//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sdtool/sdtool/quantize"
)

// TestSideFilesMustBeRegular: a type file, recipe or manifest that is a
// FIFO or a link to /dev/zero is refused at once, naming it, instead of
// hanging or running out of memory (issue 35, item 2).
func TestSideFilesMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	zero := filepath.Join(dir, "zero.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Skip(err)
	}
	model := "../../testdata/tiny-sd1.safetensors"
	for _, side := range []string{fifo, zero} {
		for _, args := range [][]string{
			{"quantize", model, "-o", filepath.Join(dir, "o.gguf"), "--type", "q8_0", "--tensor-type-file", side},
			{"merge", "--recipe", side, "-o", filepath.Join(dir, "m.safetensors")},
		} {
			done := make(chan struct{})
			go func() {
				defer close(done)
				refused(t, "not a regular file", args...)
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: still running after 20 s", strings.Join(args, " "))
			}
		}
		// report reads its manifest before anything else (it needs cgo to run).
		if _, err := quantize.ReadManifest(side); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("manifest %s: %v", side, err)
		}
	}
}

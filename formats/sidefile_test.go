//go:build unix

package formats

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadRegular: side files are read only when they are regular files
// within their bound; a FIFO (which would block), a link to /dev/zero
// (which never ends) and an oversized file are refused at once (issue 35,
// item 2).
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.txt")
	if err := os.WriteFile(ok, []byte("a=q4_K\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 101), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadRegular(ok, 100); err != nil || string(b) != "a=q4_K\n" {
		t.Fatalf("regular file: %q %v", b, err)
	}
	if b, err := ReadRegular(big, 101); err != nil || len(b) != 101 {
		t.Fatalf("file at the bound: %d bytes, %v", len(b), err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, "not a regular file"},
		{zero, "not a regular file"},
		{big, "more than the 100"},
		{dir, "is a directory"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadRegular(c.path, 100); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Errorf("%s: got %v, want an error naming it with %q", c.path, err, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: still reading after 5 s", c.path)
		}
	}
}

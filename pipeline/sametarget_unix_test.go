//go:build unix

package pipeline

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSameTarget: one file is recognised by path, through a link to it,
// and (not yet created) by one name in a folder reached through a link.
func TestSameTarget(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(real, "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{f, filepath.Join(real, ".", "f"), true},
		{f, filepath.Join(dir, "link"), true},
		{filepath.Join(real, "new"), filepath.Join(dir, "alias", "new"), true},
		{filepath.Join(real, "new"), filepath.Join(dir, "alias", "other"), false},
		{f, filepath.Join(dir, "f"), false},
	} {
		if got := SameTarget(c.a, c.b); got != c.same {
			t.Errorf("SameTarget(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

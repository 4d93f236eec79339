package pipeline

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.dat")
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error {
			_, err := io.WriteString(w, s)
			return err
		}
	}
	if err := WriteAtomic(context.Background(), out, PublishOptions{}, write("one")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "one" {
		t.Fatalf("wrote %q", b)
	}
	if _, err := os.Lstat(out + PartialSuffix); err == nil {
		t.Error("the .partial file is left after a commit")
	}
	// An existing output needs Force.
	if err := WriteAtomic(context.Background(), out, PublishOptions{}, write("two")); !errors.Is(err, ErrExists) {
		t.Errorf("existing output: %v", err)
	}
	if err := WriteAtomic(context.Background(), out, PublishOptions{Force: true}, write("two")); err != nil {
		t.Fatal(err)
	}
	// An input is never overwritten, even with Force.
	if err := WriteAtomic(context.Background(), out, PublishOptions{Force: true, Inputs: []string{out}}, write("three")); !errors.Is(err, ErrOutputIsInput) {
		t.Errorf("output is input: %v", err)
	}
	// A failing writer leaves the old output and no partial file.
	boom := errors.New("boom")
	err := WriteAtomic(context.Background(), out, PublishOptions{Force: true}, func(w io.Writer) error {
		io.WriteString(w, "half")
		return boom
	})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), out+": ") || !strings.Contains(err.Error(), "partial output removed") {
		t.Errorf("failed write: %v", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "two" {
		t.Errorf("output after a failed write: %q", b)
	}
	if _, err := os.Lstat(out + PartialSuffix); err == nil {
		t.Error("the .partial file is left after a failure")
	}
	// A cancelled context aborts even when write itself succeeded.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WriteAtomic(ctx, out, PublishOptions{Force: true}, write("four")); !errors.Is(err, ErrInterrupted) {
		t.Errorf("cancelled: %v", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "two" {
		t.Errorf("output after a cancelled write: %q", b)
	}
}

// A stale .partial that is a symlink is removed, not followed: the file it
// points to is left as it was.
func TestWriteAtomicSymlinkPartial(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symlinks need privileges on Windows")
	}
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.dat")
	if err := os.Symlink(victim, out+PartialSuffix); err != nil {
		t.Fatal(err)
	}
	err := WriteAtomic(context.Background(), out, PublishOptions{}, func(w io.Writer) error {
		_, err := io.WriteString(w, "new")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if b, _ := os.ReadFile(out); string(b) != "new" {
		t.Errorf("output %q", b)
	}
}

func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	os.WriteFile(a, nil, 0o644)
	if !SameFile(a, filepath.Join(dir, ".", "a")) || SameFile(a, filepath.Join(dir, "missing")) {
		t.Error("SameFile is wrong")
	}
	if err := CheckOutput(a, []string{filepath.Join(dir, "..", filepath.Base(dir), "a")}, true); !errors.Is(err, ErrOutputIsInput) {
		t.Errorf("CheckOutput: %v", err)
	}
}

// An output in a missing folder is refused by CheckOutput, before any work,
// naming the folder; neither error names the internal .partial file.
func TestOutputFolderChecked(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct{ out, want string }{
		{filepath.Join(dir, "nodir", "x.png"), "folder " + filepath.Join(dir, "nodir") + " does not exist"},
		{filepath.Join(file, "x.png"), "is not a folder"},
	} {
		err := CheckOutput(c.out, nil, false)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), PartialSuffix) {
			t.Errorf("CheckOutput(%s) = %v, want %q", c.out, err, c.want)
		}
		err = WriteAtomic(context.Background(), c.out, PublishOptions{}, func(io.Writer) error { return nil })
		if err == nil || strings.Contains(err.Error(), PartialSuffix) {
			t.Errorf("WriteAtomic(%s) = %v", c.out, err)
		}
	}
}

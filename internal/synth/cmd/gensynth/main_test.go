package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -testdata writes exactly the committed files, and never replaces a file
// unless -force is given; a run without arguments writes nothing.
func TestTestdataRegeneratesAndRefusesToOverwrite(t *testing.T) {
	committed, err := filepath.Abs("../../../../testdata")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Run from an empty folder holding a testdata/ as the repository does.
	cwd := t.TempDir()
	os.Mkdir(filepath.Join(cwd, "testdata"), 0o755)
	t.Chdir(cwd)
	var stderr bytes.Buffer
	if err := run(nil, &stderr); !errors.Is(err, errUsage) {
		t.Fatalf("no arguments: %v, want the usage", err)
	}
	if entries, _ := os.ReadDir("testdata"); len(entries) > 0 {
		t.Errorf("a run without arguments wrote %s", entries[0].Name())
	}
	if err := run([]string{"-testdata", dir}, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, f := range testdataFiles(dir) {
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(committed, filepath.Base(f)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the committed file", filepath.Base(f))
		}
	}
	before, _ := os.Stat(testdataFiles(dir)[0])
	err = run([]string{"-testdata", dir}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "exists (pass -force") {
		t.Fatalf("second run without -force: %v", err)
	}
	if after, _ := os.Stat(testdataFiles(dir)[0]); !after.ModTime().Equal(before.ModTime()) {
		t.Error("the refused run touched the file")
	}
	if err := run([]string{"-testdata", dir, "-force"}, &stderr); err != nil {
		t.Errorf("-force: %v", err)
	}
	out := filepath.Join(dir, "x.gguf")
	os.WriteFile(out, []byte("keep"), 0o644)
	if err := run([]string{"-arch", "sd1", "-scale", "0.025", "-depth", "1", "-o", out}, &stderr); err == nil {
		t.Error("-o over an existing file without -force was accepted")
	}
	if b, _ := os.ReadFile(out); string(b) != "keep" {
		t.Error("-o replaced an existing file without -force")
	}
}

// -help is asked for (status 0), a run with nothing to do is a usage error,
// a family layout refuses the size flags it would ignore, and every
// written file is named on stderr with its size.
func TestUsageLayoutsAndReport(t *testing.T) {
	var stderr bytes.Buffer
	if err := run([]string{"-help"}, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "-arch") {
		t.Errorf("-help: %v, usage %q", err, stderr.String())
	}
	if err := run(nil, &stderr); !errors.Is(err, errUsage) {
		t.Errorf("no arguments: %v, want errUsage (status 2)", err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "l.gguf")
	err := run([]string{"-arch", "layout-sd3-medium", "-scale", "0.5", "-depth", "1", "-o", out}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-depth, -scale do not apply") {
		t.Errorf("layout with -scale -depth: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the refused layout run wrote its output")
	}
	stderr.Reset()
	if err := run([]string{"-arch", "layout-sd3-medium", "-o", out}, &stderr); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := stderr.String(); !strings.HasPrefix(got, "wrote "+out+" (") || strings.Count(got, "\n") != 1 || st.Size() == 0 {
		t.Errorf("success report %q", got)
	}
}

// -parts names a full-size model and a folder, and refuses to replace its
// files without -force before writing anything.
func TestPartsRefusals(t *testing.T) {
	dir := t.TempDir()
	var stderr bytes.Buffer
	if err := run([]string{"-parts", "z-image-turbo"}, &stderr); err == nil || !strings.Contains(err.Error(), "-o DIR") {
		t.Errorf("no -o: %v", err)
	}
	if err := run([]string{"-parts", "sd9", "-o", dir}, &stderr); err == nil || !strings.Contains(err.Error(), `unknown -parts model "sd9"`) {
		t.Errorf("unknown model: %v", err)
	}
	existing := fullPartFiles("z-image-turbo", dir)[1]
	os.WriteFile(existing, []byte("keep"), 0o644)
	if err := run([]string{"-parts", "z-image-turbo", "-o", dir}, &stderr); err == nil || !strings.Contains(err.Error(), "exists (pass -force") {
		t.Errorf("existing %s: %v", existing, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the refused run wrote %d files", len(entries)-1)
	}
}

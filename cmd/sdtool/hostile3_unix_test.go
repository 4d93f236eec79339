//go:build unix

package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/internal/longtest"
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

// readOnlyDir returns a folder in which no file can be created: a folder
// without write permission, or /sys where the test runs as root (which
// permissions do not stop).
func readOnlyDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return dir
	}
	if err := os.WriteFile("/sys/sdtool-probe", nil, 0o644); err == nil {
		os.Remove("/sys/sdtool-probe")
		t.Skip("no read-only folder to test with")
	}
	return "/sys"
}

// TestReadOnlyOutputFailsFirst: generate and report refuse an output they
// cannot create before they load or render anything, as quantize and
// convert do (issue 34, item 7): with a broken model, the error is about
// the output.
func TestReadOnlyOutputFailsFirst(t *testing.T) {
	if !infer.Available {
		t.Skip("generate and report need a cgo build")
	}
	ro := readOnlyDir(t)
	broken := filepath.Join(t.TempDir(), "broken.gguf")
	if err := os.WriteFile(broken, []byte("GGUF not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused(t, "cannot create it in "+ro, "generate", "-m", broken, "-p", "a cat", "-o", filepath.Join(ro, "x.png"))
	refused(t, "cannot create it in "+ro, "report", broken, broken, "-o", filepath.Join(ro, "r.html"))
	refused(t, "cannot create it in "+ro, "quantize", tiny, "--type", "q8_0", "-o", filepath.Join(ro, "q.gguf"))
}

// TestReportIdenticalRungAndLinkedManifest: a rung that renders exactly as
// its source (an F16 ladder file of an F16 model) is recorded as identical,
// the report and the manifest are both written, and a manifest reached
// through a link stays a link (issue 35, items 6 and 9).
func TestReportIdenticalRungAndLinkedManifest(t *testing.T) {
	if !infer.Available {
		t.Skip("report needs a cgo build")
	}
	longtest.Skip(t, "two report renders of the tiny model (7 s)")
	dir := t.TempDir()
	if code, _, errOut := runApp(t, "quantize", tiny, "--type", "f16,q8_0", "-o", filepath.Join(dir, "t-{type}.{ext}")); code != 0 {
		t.Fatalf("quantize: %s", errOut)
	}
	link := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.Symlink(filepath.Join(dir, quantize.ManifestName), link); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(dir, "r.html")
	code, _, errOut := runApp(t, "report", link, "-m", tiny, "-o", html, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64")
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, errOut)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the manifest link became %v (%v)", st.Mode(), err)
	}
	man, err := quantize.ReadManifest(link)
	if err != nil {
		t.Fatal(err)
	}
	if q := man.Files[0].Quality; q == nil || !math.IsInf(q.PSNR, 1) {
		t.Errorf("F16 rung quality %+v, want identical", q)
	}
}

// TestLadderRungsThroughLinkedFolders: two rungs whose folders are one
// folder through a link are refused before any work, not left to race for
// one partial file (issue 35, item 9).
func TestLadderRungsThroughLinkedFolders(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "d-q8_0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d-q8_0", filepath.Join(dir, "d-q4_0")); err != nil {
		t.Fatal(err)
	}
	refused(t, "named by both", "quantize", tiny, "--type", "q8_0,q4_0", "-o", filepath.Join(dir, "d-{type}", "m.{ext}"))
	if left, _ := filepath.Glob(filepath.Join(dir, "d-q8_0", "*")); len(left) > 0 {
		t.Errorf("a refused ladder wrote %v", left)
	}
}

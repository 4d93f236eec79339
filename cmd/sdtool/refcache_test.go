//go:build cgo

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"
)

// generate --compare renders its reference once: the second comparison
// with the same reference and settings takes it from the cache and prints
// the same figures; a reference file modified since renders again, and
// --clear-reference-cache empties the cache.
func TestCompareReferenceCache(t *testing.T) {
	longtest.Skip(t, "three tiny SD 1.x compare runs")
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.gguf")
	data, err := os.ReadFile(tinyGGUF)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ref, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	args := []string{"generate", "-m", "../../testdata/tiny-sd1.safetensors", "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64",
		"--cfg-scale", "1", "-t", "1", "--compare", ref, "--json", "--force", "-o", filepath.Join(dir, "a.png"), "--reference-cache", cache}
	compare := func(extra ...string) (string, string) {
		t.Helper()
		code, out, errOut := runApp(t, append(args, extra...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		return out, errOut
	}
	first, errOut := compare()
	if strings.Contains(errOut, "reference cache") {
		t.Errorf("the first comparison says it used the cache: %s", errOut)
	}
	second, errOut := compare()
	if !strings.Contains(errOut, "from the reference cache") || second != first {
		t.Errorf("the second comparison: %s\n%s\nwant the cached reference and the same figures as\n%s", errOut, second, first)
	}
	if err := os.WriteFile(ref, data, 0o644); err != nil { // same bytes, a new modification time
		t.Fatal(err)
	}
	if _, errOut = compare("--clear-reference-cache"); !strings.Contains(errOut, "1 render removed") || strings.Contains(errOut, "from the reference cache") {
		t.Errorf("after clearing: %s", errOut)
	}
	if _, errOut = compare(); !strings.Contains(errOut, "from the reference cache") {
		t.Errorf("the render made after clearing was not kept: %s", errOut)
	}
}

// A report renders the source once for its whole ladder, and a second
// report of the same source and settings renders it not at all, writing
// the same page.
func TestReportReferenceCache(t *testing.T) {
	longtest.Skip(t, "two tiny SD 1.x reports")
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	var pages []string
	for i := range 2 {
		out := filepath.Join(dir, "r.html")
		code, _, errOut := runApp(t, "report", "../../testdata/tiny-sd1.safetensors", tinyGGUF, tinyGGUF, "-o", out,
			"-p", "a cat", "--steps", "1", "-W", "64", "-H", "64", "-t", "1", "--force", "--reference-cache", cache)
		if code != 0 {
			t.Fatalf("report %d: exit %d: %s", i, code, errOut)
		}
		if cached := strings.Contains(errOut, "from the reference cache"); cached != (i == 1) {
			t.Errorf("report %d: source from the cache %v: %s", i, cached, errOut)
		}
		page, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, string(page))
	}
	if pages[0] != pages[1] {
		t.Error("the report from the cached source differs from the first")
	}
	es, _ := filepath.Glob(filepath.Join(cache, "*.ref"))
	if len(es) != 1 {
		t.Errorf("%d renders in the cache after two reports of one prompt, want 1", len(es))
	}
}

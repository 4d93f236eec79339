package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/sdtool/sdtool/infer"
)

// reportPSNRLine is report's line for one measured file.
var reportPSNRLine = regexp.MustCompile(`(?m)^(\S+): PSNR ([0-9.]+) dB, SSIM ([0-9.]+)$`)

// report SOURCE --type T measures the file quantize --type T writes, to
// the same figures as report SOURCE FILE on that file, and leaves nothing
// but the report behind (issue 31: a ladder larger than the free disk).
func TestReportTypesMatchFilesOnDisk(t *testing.T) {
	if !infer.Available {
		t.Skip("report runs generate's engine: needs a cgo build")
	}
	dir := t.TempDir()
	q := filepath.Join(dir, "tiny-sd1-q8_0.gguf")
	if code, _, errOut := runApp(t, "quantize", tiny, "--type", "q8_0", "-o", q); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	// One cache: the second report takes the source's render from it.
	args := []string{"-p", "a cat", "--steps", "1", "-W", "64", "-H", "64", "--reference-cache", t.TempDir()}
	code, _, onDisk := runApp(t, append([]string{"report", tiny, q, "-o", filepath.Join(dir, "files.html")}, args...)...)
	if code != 0 {
		t.Fatalf("report of a file: exit %d: %s", code, onDisk)
	}
	typed := t.TempDir()
	code, _, onDemand := runApp(t, append([]string{"report", tiny, "--type", "q8_0", "-o", filepath.Join(typed, "types.html")}, args...)...)
	if code != 0 {
		t.Fatalf("report --type: exit %d: %s", code, onDemand)
	}
	a, b := reportPSNRLine.FindStringSubmatch(onDisk), reportPSNRLine.FindStringSubmatch(onDemand)
	if a == nil || b == nil {
		t.Fatalf("no PSNR line: %q / %q", onDisk, onDemand)
	}
	if a[2] != b[2] || a[3] != b[3] || b[1] != "tiny-sd1-q8_0.gguf" {
		t.Errorf("report --type: %s at %s dB, SSIM %s; the file on disk: %s at %s dB, SSIM %s", b[1], b[2], b[3], a[1], a[2], a[3])
	}
	left, err := os.ReadDir(typed)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Name() != "types.html" {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("report --type left %q, want only the report", names)
	}
}

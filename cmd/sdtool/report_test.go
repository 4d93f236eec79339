package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/quantize"
	"github.com/sdtool/sdtool/report/reporttest"
)

// A ladder of the tiny model and its report: every file gets quality
// figures in the manifest (Q8_0 closer to the source than Q2_K), and in a
// headless Chromium every image and chart of the page draws something.
func TestReportOfTinyLadder(t *testing.T) {
	if !infer.Available {
		t.Skip("report runs generate's engine: needs a cgo build")
	}
	dir := t.TempDir()
	code, _, errOut := runApp(t, "quantize", tiny, "--type", "Q8_0,Q2_K", "-o", filepath.Join(dir, "tiny-{type}.{ext}"))
	if code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	manifest := filepath.Join(dir, quantize.ManifestName)
	html := filepath.Join(dir, "report.html")
	code, _, errOut = runApp(t, "report", manifest, "-o", html, "-p", "a cat", "-p", "a red house", "--steps", "1", "-W", "64", "-H", "64")
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, errOut)
	}
	man, err := quantize.ReadManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range man.Files {
		if q := f.Quality; q == nil || q.Images != 2 || q.Report != "report.html" || q.SSIM <= 0 || q.SSIM > 1 {
			t.Fatalf("%s: quality %+v", f.File, f.Quality)
		}
	}
	if q8, q2 := man.Files[0].Quality, man.Files[1].Quality; q8.PSNR <= q2.PSNR || q8.SSIM <= q2.SSIM {
		t.Errorf("Q8_0 at %.2f dB / %.4f, Q2_K at %.2f dB / %.4f: Q8_0 must be closer to the source", q8.PSNR, q8.SSIM, q2.PSNR, q2.SSIM)
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(page), "<script") || !strings.Contains(string(page), "tiny-Q2_K.gguf") {
		t.Error("the page has a script or lacks a file")
	}
	browser := reporttest.Chromium()
	if browser == "" {
		t.Skip("no chromium to render the report in (apt-get install chromium)")
	}
	frames, blank, err := reporttest.Screenshot(browser, page, filepath.Join(dir, "shot.png"))
	if err != nil {
		t.Fatal(err)
	}
	if want := reporttest.Expected(2, len(man.Files)); len(frames) != want {
		t.Errorf("%d images and charts on the screenshot, want %d", len(frames), want)
	}
	for _, b := range blank {
		t.Errorf("the region %v of the screenshot is blank", b)
	}
}

// Arguments report cannot use are refused before any model is loaded.
func TestReportErrors(t *testing.T) {
	if !infer.Available {
		code, _, errOut := runApp(t, "report", "x.json", "-o", "r.html")
		if code != 1 || !strings.Contains(errOut, "cgo") {
			t.Errorf("without cgo: exit %d, %q", code, errOut)
		}
		return
	}
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"report", tiny, "-o", filepath.Join(dir, "r.txt")}, "-o REPORT.html"},
		{[]string{"report", tiny, "-o", filepath.Join(dir, "r.html")}, "want a manifest.json"},
		{[]string{"report", filepath.Join(dir, "missing.json"), "-o", filepath.Join(dir, "r.html")}, "missing.json"},
		{[]string{"report", tiny, filepath.Join(dir, "nope.gguf"), "-o", filepath.Join(dir, "r.html")}, "nope.gguf"},
		{[]string{"report", tiny, tiny, "-o", tiny[:len(tiny)-len(".safetensors")] + ".html", "-m", tiny}, "-m names the source"},
	} {
		code, _, errOut := runApp(t, c.args...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q, want %q", c.args, code, errOut, c.want)
		}
	}
}

// A file whose weights overflow to NaN in sd-cli's arithmetic (FP8
// without its scales) is reported with its white images and a warning;
// as the source it is refused, since nothing could be measured against it.
func TestReportNaNFile(t *testing.T) {
	if !infer.Available {
		t.Skip("report runs generate's engine: needs a cgo build")
	}
	dir := t.TempDir()
	f8 := filepath.Join(dir, "tiny-fp8.safetensors")
	if code, _, errOut := runApp(t, "quantize", tiny, "--type", "fp8_e4m3", "-o", f8); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	html := filepath.Join(dir, "report.html")
	args := []string{"report", "-o", html, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64"}
	code, _, errOut := runApp(t, append(args, tiny, f8)...)
	if code != 0 || !strings.Contains(errOut, "decoded values are NaN") {
		t.Fatalf("report of an FP8 file: exit %d: %s", code, errOut)
	}
	code, _, errOut = runApp(t, append(args, "--force", f8, tiny)...)
	if code != 1 || !strings.Contains(errOut, f8+": the source decodes to NaN values") {
		t.Fatalf("report against an FP8 source: exit %d: %s", code, errOut)
	}
}

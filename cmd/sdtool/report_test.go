package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/quantize"
	"github.com/sdtool/sdtool/report/reporttest"
)

// A ladder of the tiny model and its report: every file gets quality
// figures in the manifest (Q8_0 closer to the source than Q2_K), and in a
// headless Chromium every image and chart of the page draws something.
func TestReportOfTinyLadder(t *testing.T) {
	longtest.Skip(t, "a report of a seven-rung ladder")
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
		{[]string{"report", tiny, tiny, "--type", "q8_0", "-o", filepath.Join(dir, "r.html")}, "--type quantizes one source model"},
		{[]string{"report", tiny, "--type", "q8_0", "-m", tiny, "-o", filepath.Join(dir, "r.html")}, "with --type, the source is the argument"},
		{[]string{"report", tiny, "--type", "q8_0,nope", "-o", filepath.Join(dir, "r.html")}, "nope"},
		{[]string{"report", tiny, "--type", "q8_0,Q8_0", "-o", filepath.Join(dir, "r.html")}, "listed twice"},
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

// The Flux ladder with ComfyUI types is reportable (the T5
// tokenizer reaches the safetensors rung), and a rung that cannot be
// loaded keeps its row, marked failed with the reason, in the page and in
// the manifest, while the other rungs are measured; the command then
// exits 1 (issue 34, item 2).
func TestReportFluxLadderWithComfyRungs(t *testing.T) {
	longtest.Skip(t, "a Flux report with ComfyUI rungs")
	if !infer.Available {
		t.Skip("report runs generate's engine: needs a cgo build")
	}
	dir := t.TempDir()
	code, _, errOut := runApp(t, "quantize", "../../testdata/tiny-flux.gguf", "--type", "int8_convrot,Q4_K_M",
		"--convrot-group-size", "16", "--allow-requantize", "-o", filepath.Join(dir, "flux-{type}.{ext}"))
	if code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	if strings.Contains(errOut, "not carried") {
		t.Errorf("the ladder dropped metadata: %s", errOut)
	}
	// Break one rung: a truncated download.
	broken := "flux-Q4_K_M.gguf"
	if err := os.Truncate(filepath.Join(dir, broken), 1000); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, quantize.ManifestName)
	html := filepath.Join(dir, "report.html")
	code, _, errOut = runApp(t, "report", manifest, "-o", html, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64")
	if code != 1 || !strings.Contains(errOut, "1 file of 2 could not be reported") {
		t.Fatalf("report with a broken rung: exit %d: %s", code, errOut)
	}
	man, err := quantize.ReadManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range man.Files {
		q := f.Quality
		switch {
		case q == nil:
			t.Errorf("%s: no quality recorded", f.File)
		case f.File == broken && (q.Error == "" || q.Images != 0):
			t.Errorf("%s: quality %+v, want an error", f.File, q)
		case f.File != broken && (q.Error != "" || q.Images != 1 || q.PSNR <= 0):
			t.Errorf("%s: quality %+v", f.File, q)
		}
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `<tr class="failed"><td>`+broken+`</td>`) || !strings.Contains(string(page), "flux-int8_convrot.safetensors") {
		t.Error("the page lacks the failed row or the good rung")
	}
}

// report SOURCE FILE... describes each file as a manifest would: its type
// (not its name) and its bits per weight, which must agree with what a
// ladder's manifest says of the same bytes (issue 34, item 6).
func TestDescribeFile(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runApp(t, "quantize", tiny, "--type", "Q4_K_M,int8_convrot", "--convrot-group-size", "16", "-o", filepath.Join(dir, "t-{type}.{ext}"))
	if code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	man, err := quantize.ReadManifest(filepath.Join(dir, quantize.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range man.Files {
		mf, err := describeFile(filepath.Join(dir, f.File))
		if err != nil {
			t.Fatal(err)
		}
		d, quantized := formats.ParseType(mf.Type)
		if ok := mf.Type == "int8_tensorwise" || quantized && d.Quantized(); !ok || mf.Size != f.Size {
			t.Errorf("%s: type %q, size %d; want a quantized type and %d bytes", f.File, mf.Type, mf.Size, f.Size)
		}
		if math.Abs(mf.BitsPerWeight-f.BitsPerWeight) > 0.02*f.BitsPerWeight {
			t.Errorf("%s: %.3f bits/weight, the manifest says %.3f", f.File, mf.BitsPerWeight, f.BitsPerWeight)
		}
	}
}

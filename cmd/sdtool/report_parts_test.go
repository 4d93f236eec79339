package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/quantize"
)

// A ladder of a diffusion model released without its text encoders and
// VAE (the tiny Qwen-Image's committed DiT) is reported with the parts
// given as generate's flags (issue 31): see checkPartsReport.
func TestReportLadderOfDiffusionModelWithParts(t *testing.T) {
	if !infer.Available {
		t.Skip("report runs generate's engine: needs a cgo build")
	}
	checkPartsReport(t, map[string]string{"diffusion-model": "../../testdata/tiny-qwen-image-diffusion-model.gguf",
		"llm": "../../testdata/tiny-qwen-image-llm.gguf", "vae": "../../testdata/tiny-qwen-image-vae.safetensors"}, "llm")
}

// The same with the tiny Flux's parts (three of them: CLIP-L, T5, VAE).
func TestReportFluxLadderWithParts(t *testing.T) {
	longtest.Skip(t, "a report of the tiny Flux's DiT with its parts")
	if !infer.Available {
		t.Skip("report runs generate's engine: needs a cgo build")
	}
	parts, err := synth.TinyFlux.WriteParts(t.TempDir(), "tiny", "gguf")
	if err != nil {
		t.Fatal(err)
	}
	checkPartsReport(t, parts, "clip_l", "t5xxl")
}

// checkPartsReport quantizes parts' diffusion model into a Q8_0 and Q2_K
// ladder and reports it with the other parts (the flags given first, then
// --vae): without --vae the report is refused in one line naming that flag
// alone, before anything renders; with it every rung is rendered and
// measured, the source once (a second report takes it from the reference
// cache and measures the same figures), Q8_0 closer to it than Q2_K.
func checkPartsReport(t *testing.T, parts map[string]string, flags ...string) {
	dir := t.TempDir()
	code, _, errOut := runApp(t, "quantize", parts["diffusion-model"], "--type", "Q8_0,Q2_K", "--allow-requantize",
		"-o", filepath.Join(dir, "dit-{type}.{ext}"))
	if code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	manifest := filepath.Join(dir, quantize.ManifestName)
	cache := filepath.Join(dir, "cache")
	args := []string{"report", manifest, "-o", filepath.Join(dir, "r.html"), "-p", "a cat", "--steps", "1", "-W", "32", "-H", "32",
		"-t", "1", "--reference-cache", cache, "--force"}
	for _, f := range flags {
		args = append(args, "--"+f, parts[f])
	}

	code, _, errOut = runApp(t, args...)
	if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.HasSuffix(errOut, "give report the parts it runs with: --vae FILE\n") {
		t.Errorf("report without --vae: exit %d, %q; want one line asking for --vae FILE alone", code, errOut)
	}
	if _, err := os.Stat(cache); err == nil {
		t.Error("the report without --vae rendered something into the reference cache")
	}

	args = append(args, "--vae", parts["vae"])
	var first []quantize.ManifestFile
	for run := range 2 {
		code, _, errOut = runApp(t, args...)
		if code != 0 {
			t.Fatalf("report %d: exit %d: %s", run+1, code, errOut)
		}
		if cached := strings.Contains(errOut, "the source's renders come from the reference cache"); cached != (run == 1) {
			t.Errorf("report %d: source from the cache %v:\n%s", run+1, cached, errOut)
		}
		man, err := quantize.ReadManifest(manifest)
		if err != nil {
			t.Fatal(err)
		}
		for k, f := range man.Files {
			q := f.Quality
			if q == nil || q.Error != "" || q.Images != 1 || !(q.PSNR > 0) || !strings.Contains(errOut, f.File+": PSNR") {
				t.Fatalf("report %d: %s: quality %+v\n%s", run+1, f.File, q, errOut)
			}
			if run == 1 && (q.PSNR != first[k].Quality.PSNR || q.SSIM != first[k].Quality.SSIM) {
				t.Errorf("%s: %.4f dB / %.5f against the cached source, %.4f dB / %.5f against the rendered one",
					f.File, q.PSNR, q.SSIM, first[k].Quality.PSNR, first[k].Quality.SSIM)
			}
		}
		first = man.Files
	}
	if q8, q2 := first[0].Quality, first[1].Quality; q8.PSNR <= q2.PSNR {
		t.Errorf("Q8_0 at %.2f dB, Q2_K at %.2f dB: Q8_0 must be closer to the source", q8.PSNR, q2.PSNR)
	}
}

//go:build cgo

package main

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/infer/pngtext"
)

const tinyGGUF = "../../testdata/tiny-sd1.gguf"

func TestGenerateSameSeedSameBytes(t *testing.T) {
	dir := t.TempDir()
	var pngs [][]byte
	for i, seed := range []string{"5", "5", "6"} {
		out := filepath.Join(dir, "img"+string(rune('a'+i))+".png")
		code, _, errOut := runApp(t, "generate", "-m", tinyGGUF, "-p", "a cat", "-n", "ugly", "--steps", "2",
			"-W", "64", "-H", "64", "--seed", seed, "-t", "1", "-o", out)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(errOut, "s/step") {
			t.Errorf("no timing summary in %q", errOut)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		pngs = append(pngs, b)
	}
	if !bytes.Equal(pngs[0], pngs[1]) {
		t.Error("the same seed wrote different PNG bytes")
	}
	if bytes.Equal(pngs[0], pngs[2]) {
		t.Error("another seed wrote the same PNG")
	}
	text, err := pngtext.Read(bytes.NewReader(pngs[0]))
	if err != nil {
		t.Fatal(err)
	}
	p := text[pngtext.ParametersKey]
	for _, want := range []string{"a cat", "Negative prompt: ugly", "Steps: 2", "Seed: 5", "Size: 64x64", "tiny-sd1.gguf"} {
		if !strings.Contains(p, want) {
			t.Errorf("parameters %q lack %q", p, want)
		}
	}
}

func TestGenerateCompare(t *testing.T) {
	out := filepath.Join(t.TempDir(), "c.png")
	code, stdout, errOut := runApp(t, "generate", "-m", tinyGGUF, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64",
		"-t", "1", "--cfg-scale", "1", "-o", out, "--compare", tinyGGUF)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// The reference's render has its own timing and memory line.
	if !strings.Contains(errOut, "reference: rendered model="+tinyGGUF+": load ") || strings.Count(errOut, "s/step") != 2 || strings.Count(errOut, "resident") != 2 {
		t.Errorf("want a timing and memory line for each render:\n%s", errOut)
	}
	// The same weights: identical images (PSNR +Inf), cosine 1 and zero block errors.
	for _, want := range []string{"PSNR +Inf dB", "SSIM 1.0000", "latent cosine 1.000000", "middle_block", "output_blocks.11"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("compare output lacks %q:\n%s", want, stdout)
		}
	}
}

// generate --compare --json gives the figures as data: the PSNR equals the
// one measured here from the two images written by separate runs, and
// every block has a relative error (issue 34, item 17).
func TestGenerateCompareJSON(t *testing.T) {
	dir := t.TempDir()
	q4 := filepath.Join(dir, "q4.gguf")
	if code, _, errOut := runApp(t, "quantize", tinyGGUF, "--type", "Q4_0", "-o", q4); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	args := []string{"generate", "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64", "-t", "1", "--cfg-scale", "1"}
	got, want := filepath.Join(dir, "q4.png"), filepath.Join(dir, "ref.png")
	code, stdout, errOut := runApp(t, append(args, "-m", q4, "-o", got, "--compare", tinyGGUF, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if code, _, errOut := runApp(t, append(args, "-m", tinyGGUF, "-o", want)...); code != 0 {
		t.Fatalf("reference: exit %d: %s", code, errOut)
	}
	var r struct {
		Model     []string `json:"model"`
		PSNR      *float64 `json:"psnr_db"`
		Identical bool     `json:"identical"`
		Blocks    []struct {
			Name     string   `json:"name"`
			RelError *float64 `json:"rel_error"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v in %q", err, stdout)
	}
	checkDocumented(t, "compare-json.md", stdout, false)
	a, b := readTestPNG(t, want), readTestPNG(t, got)
	psnr, err := metrics.PSNR(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Identical || r.PSNR == nil || math.Abs(*r.PSNR-psnr) > 1e-9 || len(r.Model) != 1 || r.Model[0] != "model="+q4 {
		t.Errorf("JSON %s: want psnr_db %.6f measured from the images", stdout, psnr)
	}
	if len(r.Blocks) == 0 {
		t.Fatal("no blocks")
	}
	changed := 0
	for _, bl := range r.Blocks {
		if bl.RelError == nil || *bl.RelError < 0 {
			t.Errorf("block %s: rel_error %v", bl.Name, bl.RelError)
		} else if *bl.RelError > 0 {
			changed++
		}
	}
	if changed == 0 {
		t.Error("q4_0 weights changed no block's output")
	}
	if code, _, errOut := runApp(t, append(args, "-m", q4, "-o", filepath.Join(dir, "x.png"), "--json")...); code != 1 || !strings.Contains(errOut, "give --compare") {
		t.Errorf("--json without --compare: exit %d, %q", code, errOut)
	}
}

// readTestPNG decodes a PNG file.
func readTestPNG(t *testing.T, path string) image.Image {
	t.Helper()
	img, err := readPNG(path)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestGenerateErrors(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "x.png")
	os.WriteFile(exists, nil, 0o644)
	for _, args := range [][]string{
		{"generate", "-m", tinyGGUF, "-p", "a", "-o", filepath.Join(dir, "x.jpg")},
		{"generate", "-m", tinyGGUF, "-p", "a", "-o", exists},
		{"generate", "-m", tinyGGUF, "-p", "a", "-o", filepath.Join(dir, "y.png"), "--runtime", "onnx"},
		{"generate", "-m", tinyGGUF, "-p", "a", "-o", filepath.Join(dir, "y.png"), "--sampling-method", "ddim"},
		{"generate", "-m", filepath.Join(dir, "missing.gguf"), "-p", "a", "-o", filepath.Join(dir, "y.png")},
	} {
		code, _, errOut := runApp(t, args...)
		// The error alone: the note about a build without SIMD kernels
		// comes only when the work starts.
		if code != 1 || !strings.HasPrefix(errOut, "sdtool: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// SDXL from a mix of component formats and types: an INT8 (convrot)
// safetensors model whose VAE, head counts and tokenizer come from the GGUF
// checkpoint given as --vae, compared with a q8_0 GGUF copy whose unset
// reference VAE is the model's; a separate --compare-vae changes only the
// decoded image.
func TestGenerateSDXLMixedComponents(t *testing.T) {
	longtest.Skip(t, "SDXL from mixed components")
	dir := t.TempDir()
	int8 := filepath.Join(dir, "xl-int8.safetensors")
	q8 := filepath.Join(dir, "xl-q8_0.gguf")
	for _, args := range [][]string{
		{"quantize", tinySDXL, "-o", int8, "--type", "int8_convrot", "--convrot-group-size", "16"},
		{"quantize", tinySDXL, "-o", q8, "--type", "q8_0"},
	} {
		if code, _, errOut := runApp(t, args...); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut)
		}
	}
	out := filepath.Join(dir, "xl.png")
	code, stdout, errOut := runApp(t, "generate", "-m", int8, "--vae", tinySDXL, "-p", "a cat", "--steps", "2", "-W", "64", "-H", "64",
		"-t", "1", "-o", out, "--compare", q8)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "SDXL") || !strings.Contains(errOut, "peak RSS") {
		t.Errorf("summary %q names no SDXL or peak RSS", errOut)
	}
	if !strings.Contains(stdout, "(model) with model="+q8+" vae="+tinySDXL+" (reference)") {
		t.Errorf("the reference did not take the model's VAE:\n%s", stdout)
	}
	if strings.Contains(stdout, "PSNR +Inf") || !strings.Contains(stdout, "image PSNR") || !strings.Contains(stdout, "middle_block") {
		t.Errorf("compare output:\n%s", stdout)
	}
}

// A copy converted without metadata (sd-cli's bytes) cannot tell its head
// count: generate names the missing key and the command that adds it, and
// a copy converted the default way runs.
func TestGenerateConvertedCopies(t *testing.T) {
	dir := t.TempDir()
	bare, kept := filepath.Join(dir, "bare.gguf"), filepath.Join(dir, "kept.gguf")
	for _, args := range [][]string{
		{"convert", "-m", tinyGGUF, "-o", bare, "--type", "q8_0", "--no-metadata"},
		{"convert", "-m", "../../testdata/tiny-sd1.safetensors", "-o", kept, "--type", "q8_0"},
	} {
		if code, _, errOut := runApp(t, args...); code != 0 {
			t.Fatalf("%q: %s", args, errOut)
		}
	}
	code, _, errOut := runApp(t, "generate", "-m", bare, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64", "-t", "1", "-o", filepath.Join(dir, "b.png"))
	if code != 1 || !strings.Contains(errOut, "sdtool.unet.num_heads") || !strings.Contains(errOut, "--metadata") {
		t.Errorf("no-metadata copy: exit %d, stderr %q", code, errOut)
	}
	code, stdout, errOut := runApp(t, "generate", "-m", kept, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64", "-t", "1",
		"--cfg-scale", "1", "-o", filepath.Join(dir, "k.png"), "--compare", "../../testdata/tiny-sd1.safetensors")
	if code != 0 || !strings.Contains(stdout, "PSNR") {
		t.Errorf("converted copy: exit %d, stderr %q", code, errOut)
	}
}

// Outputs in a missing folder are refused before the model is even opened,
// naming the folder, not the internal .partial file.
func TestGenerateChecksOutputFoldersFirst(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.gguf")
	for _, args := range [][]string{
		{"-o", filepath.Join(dir, "nodir", "x.png")},
		{"-o", filepath.Join(dir, "x.png"), "--imatrix-out", filepath.Join(dir, "nodir", "x.dat")},
	} {
		code, _, errOut := runApp(t, append([]string{"generate", "-m", missing, "-p", "a cat"}, args...)...)
		if code != 1 || !strings.Contains(errOut, "folder "+filepath.Join(dir, "nodir")+" does not exist") || strings.Contains(errOut, ".partial") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// A build without SIMD kernels says so once per run, when the work starts;
// a build with them says nothing.
func TestGenerateSlowBuildNoteOnce(t *testing.T) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "p.txt")
	os.WriteFile(prompts, []byte("a cat\na dog\n"), 0o644)
	code, _, errOut := runApp(t, "generate", "-m", tinyGGUF, "--prompt-file", prompts, "--steps", "1", "-W", "64", "-H", "64",
		"-t", "1", "--cfg-scale", "1", "-o", filepath.Join(dir, "x.png"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := 1
	if infer.LinkedAVX2() {
		want = 0
	}
	if n := strings.Count(errOut, "built without ggml's SIMD kernels"); n != want {
		t.Errorf("the slow-build note appears %d times, want %d:\n%s", n, want, errOut)
	}
}

// The command generate's missing-tokenizer error names exists and fixes it.
func TestGenerateMissingTokenizerNamesAWorkingFix(t *testing.T) {
	dir := t.TempDir()
	noTokenizers(t, dir)
	bare, fixed := filepath.Join(dir, "bare.gguf"), filepath.Join(dir, "fixed.gguf")
	os.Mkdir(filepath.Join(dir, "tok"), 0o755)
	merges := filepath.Join(dir, "tok", "merges.txt")
	src, err := formats.Open(tinyGGUF)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := src.Metadata().String("sdtool.tokenizer.clip.merges")
	src.Close()
	os.WriteFile(merges, []byte(m), 0o644)
	heads := filepath.Join(dir, "heads.gguf")
	if code, _, errOut := runApp(t, "convert", "-m", tinyGGUF, "-o", bare, "--no-metadata"); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := runApp(t, "convert", "-m", bare, "-o", heads, "--metadata", "sdtool.unet.num_heads=8", "--metadata", "sdtool.clip.num_heads=2"); code != 0 {
		t.Fatal(errOut)
	}
	code, _, errOut := runApp(t, "generate", "-m", heads, "-p", "a cat", "-o", filepath.Join(dir, "x.png"), "--steps", "1", "-W", "64", "-H", "64")
	if code != 1 || !strings.Contains(errOut, "sdtool convert --tokenizer") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runApp(t, "convert", "-m", heads, "-o", fixed, "--tokenizer", merges); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := runApp(t, "generate", "-m", fixed, "-p", "a cat", "-o", filepath.Join(dir, "x.png"), "--steps", "1", "-W", "64", "-H", "64"); code != 0 {
		t.Errorf("after convert --tokenizer: exit %d, %s", code, errOut)
	}
}

// noTokenizers points the places generate searches for a CLIP tokenizer
// (home folder, Hugging Face cache) at the empty folder dir.
func noTokenizers(t *testing.T, dir string) {
	t.Setenv("HOME", dir)
	t.Setenv("HF_HOME", filepath.Join(dir, "hf"))
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "")
}

// A model without a tokenizer finds the one beside it and says so; with
// none anywhere the error lists where it looked; --tokenizer wins.
func TestGenerateFindsTokenizer(t *testing.T) {
	dir := t.TempDir()
	noTokenizers(t, dir)
	src, err := formats.Open(tinyGGUF)
	if err != nil {
		t.Fatal(err)
	}
	merges, _ := src.Metadata().String("sdtool.tokenizer.clip.merges")
	src.Close()
	model := filepath.Join(dir, "models", "m.gguf")
	os.Mkdir(filepath.Join(dir, "models"), 0o755)
	bare := filepath.Join(dir, "bare.gguf")
	if code, _, errOut := runApp(t, "convert", "-m", tinyGGUF, "-o", bare, "--no-metadata"); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := runApp(t, "convert", "-m", bare, "-o", model, "--metadata", "sdtool.unet.num_heads=8", "--metadata", "sdtool.clip.num_heads=2"); code != 0 {
		t.Fatal(errOut)
	}
	gen := func(extra ...string) (int, string) {
		args := append([]string{"generate", "-m", model, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64", "--cfg-scale", "1", "-o", filepath.Join(dir, "x.png"), "--force"}, extra...)
		code, _, errOut := runApp(t, args...)
		return code, errOut
	}
	code, errOut := gen()
	if code != 1 || !strings.Contains(errOut, "no CLIP tokenizer found") || !strings.Contains(errOut, filepath.Join(dir, "models", "tokenizer.json")) ||
		!strings.Contains(errOut, filepath.Join(dir, "hf", "hub", "models--openai--clip-vit-large-patch14")) {
		t.Errorf("no tokenizer anywhere: exit %d, %q", code, errOut)
	}
	beside := filepath.Join(dir, "models", "merges.txt")
	os.WriteFile(beside, []byte(merges), 0o644)
	if code, errOut := gen(); code != 0 || !strings.Contains(errOut, "tokenizer: "+beside+" (beside the model)") {
		t.Errorf("tokenizer beside the model: exit %d, %q", code, errOut)
	}
	other := filepath.Join(dir, "other.txt")
	os.WriteFile(other, []byte(merges), 0o644)
	if code, errOut := gen("--tokenizer", other); code != 0 || strings.Contains(errOut, "tokenizer: ") {
		t.Errorf("--tokenizer: exit %d, %q", code, errOut)
	}
}

// Components from another family: a VAE of the wrong latent width is
// refused before any work, naming the --vae file and its tensor (it
// reached the decoder as a ggml size error); a text encoder the family
// never reads is named in a warning, since the image ignores it.
func TestGenerateForeignComponents(t *testing.T) {
	flux := "../../testdata/tiny-flux.gguf"
	out := filepath.Join(t.TempDir(), "x.png")
	base := []string{"generate", "-m", tinyGGUF, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64", "-t", "1", "-o", out, "--force"}
	code, _, stderr := runApp(t, append(base, "--vae", flux)...)
	if code != 1 || !strings.Contains(stderr, flux+": VAE: first_stage_model.decoder.conv_in.weight takes 16-channel latents") ||
		!strings.Contains(stderr, "makes 4-channel ones") {
		t.Errorf("--vae of Flux on SD 1.x: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runApp(t, append(base, "--t5xxl", flux)...)
	if code != 0 || !strings.Contains(stderr, "warning: --t5xxl "+flux+": SD 1.x reads none of its tensors") {
		t.Errorf("--t5xxl on SD 1.x: exit %d, stderr %q", code, stderr)
	}
	// An SDXL checkpoint as --clip_l replaces SD 1.x's CLIP with tensors it
	// cannot read: the error names what is missing (it said "generate runs
	// ..., SD 1.x, ... only", of an SD 1.x model).
	code, _, stderr = runApp(t, append(base, "--clip_l", "../../testdata/tiny-sdxl.gguf")...)
	if code != 1 || !strings.Contains(stderr, "a SD 1.x model without the tensor cond_stage_model.transformer.text_model.embeddings.token_embedding.weight") {
		t.Errorf("--clip_l of SDXL on SD 1.x: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runApp(t, append(base, "--vae", tinyGGUF)...)
	if code != 0 || strings.Contains(stderr, "warning") {
		t.Errorf("--vae of the same family: exit %d, stderr %q", code, stderr)
	}
}

// TestGenerateRefImageErrors checks --ref-image's refusals, each one line:
// a missing file, a file that is not an image, and a family that reads no
// reference images (the tiny SD 1.x).
func TestGenerateRefImageErrors(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.png")
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewNRGBA(image.Rect(0, 0, 8, 8))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ref, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	notPNG := filepath.Join(dir, "ref.txt")
	if err := os.WriteFile(notPNG, []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ ref, want string }{
		{filepath.Join(dir, "missing.png"), "missing.png"},
		{notPNG, "ref.txt: image: unknown format"},
		{ref, "SD 1.x: reference images are not supported"},
	} {
		code, _, errOut := runApp(t, "generate", "-m", tinyGGUF, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64",
			"-t", "1", "-r", c.ref, "-o", filepath.Join(dir, "out.png"))
		msg := strings.TrimSpace(errOut)
		if code == 0 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") > 0 {
			t.Errorf("-r %s: exit %d, %q; want one line with %q", filepath.Base(c.ref), code, errOut, c.want)
		}
	}
}

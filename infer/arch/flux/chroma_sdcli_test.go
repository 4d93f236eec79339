//go:build cgo

package flux

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/internal/synth"
)

// Chroma image parity against sd-cli (SDTOOL_SDCLI; skipped without it)
// on synth.ChromaParity written as the three component files people
// download (--diffusion-model, --t5xxl, --vae), with a negative pass (CFG
// 4, Chroma's default). The prompt is blank: sd-cli's build stubs T5's
// vocabulary, so its T5 sees </s> and padding whatever the prompt, and
// sdtool's T5 sees the same for a prompt of spaces; the DiT's padding
// mask (</s> and one pad kept) is the same on both sides.

// chromaParityRun is the parity run's settings.
func chromaParityRun(tb testing.TB) fluxParityRun {
	return fluxParityRun{Parts: chromaParityModel(tb), Prompt: " ", Size: 128, Steps: 2, Seed: 42, Threads: 2, CFG: 4}
}

// chromaParityModel writes synth.ChromaParity's component files into a
// temporary folder, or into SDTOOL_CHROMA_PARITY_DIR once and reuses them.
func chromaParityModel(tb testing.TB) map[string]string {
	tb.Helper()
	dir := os.Getenv("SDTOOL_CHROMA_PARITY_DIR")
	if dir == "" {
		dir = tb.TempDir()
	} else {
		parts := map[string]string{}
		for _, flag := range []string{"diffusion-model", "t5xxl", "vae"} {
			p := filepath.Join(dir, "chroma-parity-"+flag+".safetensors")
			if _, err := os.Stat(p); err == nil {
				parts[flag] = p
			}
		}
		if len(parts) == 3 {
			return parts
		}
	}
	parts, err := synth.ChromaParity.WriteParts(dir, "chroma-parity", "safetensors")
	if err != nil {
		tb.Fatal(err)
	}
	return parts
}

func TestChromaMatchesSDCLI(t *testing.T) {
	bin := inferutil.ChromaSDCLI(t)
	r := chromaParityRun(t)
	out := filepath.Join(t.TempDir(), "sdcli.png")
	runFluxSDCLI(t, bin, r, out)
	ref := inferutil.ReadPNGFile(t, out)
	img, fam := inferutil.GenerateParts(t, r.components(), infer.LoadOptions{Threads: r.Threads}, r.request())
	if fam.Name() != "chroma" {
		t.Fatalf("family %s, want chroma", fam.Name())
	}
	if d := os.Getenv("SDTOOL_CHROMA_PARITY_DIR"); d != "" {
		inferutil.CopyFile(t, out, filepath.Join(d, "sdcli.png"))
		if err := inferutil.WritePNGFile(filepath.Join(d, "sdtool.png"), img); err != nil {
			t.Fatal(err)
		}
	}
	psnr, err := metrics.PSNR(ref, img)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sdtool vs sd-cli, Chroma, 128x128, %d euler steps, cfg %g: PSNR %.2f dB", r.Steps, r.CFG, psnr)
	if psnr < 50 {
		t.Errorf("PSNR %.2f dB against sd-cli, want at least 50", psnr)
	}
}

// BenchmarkChromaVsSDCLI alternates one sd-cli run and one sdtool run
// (each in a fresh process, TestFluxGenerateChild) of the parity run and
// reports both sides' seconds per step and peak RSS and their ratios.
func BenchmarkChromaVsSDCLI(b *testing.B) {
	r := chromaParityRun(b)
	if s := os.Getenv("SDTOOL_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		r.Threads = n
	}
	benchFluxVsSDCLI(b, inferutil.ChromaSDCLI(b), r)
}

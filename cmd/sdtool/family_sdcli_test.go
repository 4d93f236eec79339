package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
)

// Parity per family (issue 36, item 4): for each family that generate runs from one checkpoint, a weighted
// prompt, a weighted negative prompt and img2img (and the plain prompt they start from) render at 50 dB or
// more against sd-cli, so that parity is held by a test and not measured once. The models are synthetic
// (SD 1.5 at full size; SD 2.x and SDXL with their text encoders at full size and depth, as sd.cpp fixes
// them, and their UNets at full depth, 128 wide), or real ones named by SDTOOL_SD15_MODEL, SDTOOL_SD2_MODEL
// and SDTOOL_SDXL_MODEL. The DiT families (Z-Image, Flux.2 klein, Qwen-Image, SD3, Flux,
// Chroma) run the same three cases in infer's TestFamilyPromptsMatchSDCLI, on their own parity models and
// harnesses there.
//
//	SDTOOL_LONG=1 SDTOOL_SDCLI=/path/sd-cli go test ./cmd/sdtool -run FamilyParitySDCLI -v -timeout 2h

// familyModel writes or names the checkpoint of one family; "" skips it.
func familyModel(t *testing.T, family, dir string) string {
	t.Helper()
	switch family {
	case "sd1":
		return parityModel(t, dir)
	case "sd2":
		if p := os.Getenv("SDTOOL_SD2_MODEL"); p != "" {
			return p
		}
		return synthFamilyModel(t, dir, "sd2-unet128.safetensors", synth.Spec{Arch: "sd2", Scale: 0.4, TextScale: 1, VAEScale: 1, Seed: 1, DType: formats.F16})
	case "sdxl":
		if p := os.Getenv("SDTOOL_SDXL_MODEL"); p != "" {
			return p
		}
		return synthFamilyModel(t, dir, "sdxl-unet128.safetensors", synth.Spec{Arch: "sdxl", Scale: 0.4, TextScale: 1, VAEScale: 1, Seed: 1, DType: formats.F16})
	}
	return ""
}

// synthFamilyModel writes spec to dir/name unless it is there (SDTOOL_LORA_KEEP keeps dir between runs).
func synthFamilyModel(t *testing.T, dir, name string, spec synth.Spec) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if err := synth.Write(path, spec); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFamilyParitySDCLI(t *testing.T) {
	bin, _ := sdcliEnv(t)
	longtest.Skip(t, "per-family parity against sd-cli")
	if _, err := os.Stat(parityMerges); err != nil {
		t.Skipf("no CLIP vocabulary at %s", parityMerges)
	}
	for _, family := range []string{"sd1", "sd2", "sdxl"} {
		t.Run(family, func(t *testing.T) {
			dir := workDir(t, "family-"+family)
			model := familyModel(t, family, dir)
			base := defaultParity()
			base.prompt, base.seed = "a photo of a dog on a sofa", 3
			weighted := base
			weighted.prompt = "a (photo:1.3) of a [dog] on a ((sofa))"
			negative := base
			negative.negative = "(blurry:1.2), [ugly]"
			t.Run("plain", func(t *testing.T) { familyCase(t, bin, model, dir, family, "plain", base) })
			// sd-cli's plain image is img2img's init; rendered here when -run skipped the plain case.
			init := filepath.Join(dir, "sdcli-"+family+"-plain.png")
			if _, err := os.Stat(init); err != nil {
				sdcliRender(t, bin, model, base, init)
			}
			img2img := weighted
			img2img.init, img2img.strength, img2img.seed = init, 0.6, 7
			cases := []struct {
				name string
				p    paritySettings
			}{{"weighted", weighted}, {"negative", negative}, {"img2img", img2img}}
			if family == "sd2" {
				// The synthetic UNet probes as ε; SD 2.x's 768-v models predict v, forced here in both programs.
				v := weighted
				v.prediction = "v"
				cases = append(cases, struct {
					name string
					p    paritySettings
				}{"v-prediction", v})
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { familyCase(t, bin, model, dir, family, c.name, c.p) })
			}
		})
	}
}

// familyCase renders one case with both programs and wants 50 dB or more between them.
func familyCase(t *testing.T, bin, model, dir, family, name string, p paritySettings) {
	psnr, _ := sdtoolVsSDCLI(t, bin, model, dir, family+"-"+name, p)
	t.Logf("%s %s: sdtool vs sd-cli %.2f dB", family, name, psnr)
	if psnr < 50 {
		t.Errorf("%s %s: %.2f dB against sd-cli, want at least 50", family, name, psnr)
	}
}

//go:build cgo

package wan

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
)

// Wan frame parity against sd-cli (SDTOOL_SDCLI; skipped without it, and
// outside SDTOOL_LONG=1) on synth.WanParity: the 1.3B DiT at full width
// with its 30 blocks (sd.cpp refuses other depths) in q8_0 as a GGUF that
// sd.cpp's reader takes (the patch kernel in four dimensions), the full
// Wan 2.1 VAE as safetensors, no text encoder and an empty prompt (both
// condition on 256 zero tokens then; sd-cli's build stubs UMT5's
// vocabulary anyway).

// wanParityRun is one video's settings, pinned on both sides.
type wanParityRun struct {
	dit, vae       string
	size, frames   int
	steps, threads int
	seed           uint64
	cfg, shift     float32
	highDiT        string // Wan 2.2 A14B's high-noise expert ("" for none)
	highSteps      int
	highCFG        float32
	init           string  // an init image (PNG) for image-to-video ("" for none)
	parityPSNR     float64 // every frame's least PSNR against sd-cli's
}

func (r wanParityRun) sdcliArgs(out string) []string {
	args := []string{"-M", "vid_gen", "--diffusion-model", r.dit, "--vae", r.vae, "-p", "",
		"-W", strconv.Itoa(r.size), "-H", strconv.Itoa(r.size), "--video-frames", strconv.Itoa(r.frames),
		"--steps", strconv.Itoa(r.steps), "-s", strconv.FormatUint(r.seed, 10), "--sampling-method", "euler",
		"--scheduler", "discrete", "--cfg-scale", fmt.Sprint(r.cfg), "--flow-shift", fmt.Sprint(r.shift),
		"--rng", "cuda", "-t", strconv.Itoa(r.threads), "-o", out, "-v"}
	if r.highDiT != "" {
		args = append(args, "--high-noise-diffusion-model", r.highDiT, "--high-noise-steps", strconv.Itoa(r.highSteps),
			"--high-noise-cfg-scale", fmt.Sprint(r.highCFG), "--high-noise-sampling-method", "euler")
	}
	if r.init != "" {
		args = append(args, "-i", r.init)
	}
	return args
}

// wanParityFiles writes WanParity's DiT (GGUF) and VAE (safetensors) into
// SDTOOL_WAN_PARITY_DIR (kept and reused) or a temporary folder.
func wanParityFiles(tb testing.TB, c synth.Wan, name string) (dit, vae string) {
	tb.Helper()
	dir := os.Getenv("SDTOOL_WAN_PARITY_DIR")
	if dir == "" {
		dir = tb.TempDir()
	}
	c.Fold = true
	vaeName := "wan-parity-vae.safetensors"
	if c.V22 {
		vaeName = "wan22-parity-vae.safetensors"
	}
	for _, f := range []struct {
		path, flag, format string
	}{
		{filepath.Join(dir, name+"-dit.gguf"), "diffusion-model", "gguf"},
		{filepath.Join(dir, vaeName), "vae", "safetensors"},
	} {
		if _, err := os.Stat(f.path); err == nil {
			continue
		}
		err := pipeline.WriteAtomic(context.Background(), f.path, pipeline.PublishOptions{}, func(w io.Writer) error {
			return c.EncodePart(w, f.format, f.flag)
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return filepath.Join(dir, name+"-dit.gguf"), filepath.Join(dir, vaeName)
}

// wanParityEnv skips a frame parity test (what) unless SDTOOL_LONG is set,
// SDTOOL_SDCLI names sd-cli and the linked ggml computes as sd-cli's does.
func wanParityEnv(t *testing.T, what string) {
	t.Helper()
	longtest.Skip(t, what)
	if os.Getenv("SDTOOL_SDCLI") == "" {
		t.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	inferutil.RequireParityBuild(t)
}

// checkWanParity renders r with sd-cli (PNG frames) and with sdtool and
// requires every frame at r.parityPSNR or more.
func checkWanParity(t *testing.T, r wanParityRun) {
	bin := os.Getenv("SDTOOL_SDCLI")
	dir := t.TempDir()
	cmd := exec.Command(bin, r.sdcliArgs(filepath.Join(dir, "sd_%03d.png"))...)
	if log, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
	}
	comps := infer.Components{"diffusion-model": r.dit, "vae": r.vae}
	if r.highDiT != "" {
		comps["high-noise-diffusion-model"] = r.highDiT
	}
	m, err := infer.Load(comps, infer.LoadOptions{Threads: r.threads, FlowShift: r.shift})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	req := infer.Request{Width: r.size, Height: r.size, Frames: r.frames, Steps: r.steps, CFGScale: r.cfg, Seed: r.seed,
		RNG: infer.RNGCUDA, Method: infer.Euler, Scheduler: infer.SchedulerDiscrete}
	if r.highDiT != "" {
		req.HighNoise = &infer.HighNoise{Steps: r.highSteps, CFGScale: r.highCFG, Method: infer.Euler}
	}
	if r.init != "" {
		req.Init, _, _ = infer.CHWFromImage(inferutil.ReadPNGFile(t, r.init))
		req.Strength = 0.75 // sd-cli's default, which its image-to-video ignores
	}
	res, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := infer.FrameImages(res)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		ref := inferutil.ReadPNGFile(t, filepath.Join(dir, fmt.Sprintf("sd_%03d.png", i)))
		p, err := metrics.PSNR(ref, f)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("frame %d: PSNR %.2f dB against sd-cli", i, p)
		if p < r.parityPSNR {
			t.Errorf("frame %d: PSNR %.2f dB against sd-cli, want >= %g", i, p, r.parityPSNR)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("sd_%03d.png", len(frames)))); err == nil {
		t.Errorf("sd-cli wrote more than the %d frames sdtool did", len(frames))
	}
}

// TestWanSDCLIParity is Wan 2.1 text-to-video, 5 frames of 64x64 in 2 steps with classifier-free guidance.
func TestWanSDCLIParity(t *testing.T) {
	wanParityEnv(t, "Wan frame parity against sd-cli")
	dit, vae := wanParityFiles(t, synth.WanParity, "wan-parity")
	checkWanParity(t, wanParityRun{dit: dit, vae: vae, size: 64, frames: 5, steps: 2, threads: 2, seed: 42, cfg: 6, shift: 5, parityPSNR: 50})
}

// TestWanA14BSDCLIParity is Wan 2.2 A14B's two experts (sd.cpp runs any
// Wan-shaped DiT as either): two WanParity DiTs of their own seeds in q4_0
// (two 30-block DiTs fit in memory so), the high-noise one for the first
// of three steps with a guidance scale of its own.
func TestWanA14BSDCLIParity(t *testing.T) {
	wanParityEnv(t, "Wan 2.2 A14B frame parity against sd-cli")
	r := wanA14BRun(t)
	r.parityPSNR = 50
	checkWanParity(t, r)
}

// wanA14BRun is the A14B run: two WanParity DiTs of their own seeds in
// q4_0, the high-noise one for the first of three steps with a guidance
// scale of its own.
func wanA14BRun(tb testing.TB) wanParityRun {
	low := synth.WanParity
	low.Quant = formats.Q4_0
	high := low
	high.Seed = 9
	dit, vae := wanParityFiles(tb, low, "wan-parity-q4-low")
	hdit, _ := wanParityFiles(tb, high, "wan-parity-q4-high")
	return wanParityRun{dit: dit, vae: vae, size: 64, frames: 5, steps: 2, threads: 2, seed: 42, cfg: 6, shift: 5,
		highDiT: hdit, highSteps: 1, highCFG: 4}
}

// TestWanTI2VSDCLIParity is Wan 2.2 TI2V-5B text-to-video at the only
// size sd.cpp runs it (synth.WanTI2VParity: 30 blocks 3072 wide, its DiT
// in q4_0, Wan 2.2's 48-channel VAE at full width; each program holds
// about 4 GiB): 5 frames of 64x64 (2 latent frames of 4x4 cells) in 2 steps.
func TestWanTI2VSDCLIParity(t *testing.T) {
	wanParityEnv(t, "Wan 2.2 TI2V-5B frame parity against sd-cli")
	dit, vae := wanParityFiles(t, synth.WanTI2VParity, "wan-ti2v-parity-q4")
	checkWanParity(t, wanParityRun{dit: dit, vae: vae, size: 64, frames: 5, steps: 2, threads: 2, seed: 42, cfg: 6, shift: 5, parityPSNR: 50})
}

// TestWanTI2VImageToVideoSDCLIParity is TestWanTI2VSDCLIParity's model
// and settings with an init image (-i): frame 0 encoded by Wan 2.2's VAE
// and held, a timestep per latent frame.
func TestWanTI2VImageToVideoSDCLIParity(t *testing.T) {
	wanParityEnv(t, "Wan 2.2 TI2V-5B image-to-video frame parity against sd-cli")
	dit, vae := wanParityFiles(t, synth.WanTI2VParity, "wan-ti2v-parity-q4")
	init := filepath.Join(t.TempDir(), "init.png")
	if err := inferutil.WritePNGFile(init, wanInitImage(64)); err != nil {
		t.Fatal(err)
	}
	checkWanParity(t, wanParityRun{dit: dit, vae: vae, size: 64, frames: 5, steps: 2, threads: 2, seed: 42, cfg: 6, shift: 5,
		init: init, parityPSNR: 50})
}

// wanInitImage is a size×size picture with smooth gradients and a disc,
// an init image both programs read from the same PNG.
func wanInitImage(size int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, size, size))
	c := float64(size) / 2
	for y := range size {
		for x := range size {
			dx, dy := float64(x)-c, float64(y)-c*0.8
			v := color.RGBA{uint8(255 * x / size), uint8(255 * y / size), 96, 255}
			if dx*dx+dy*dy < c*c/4 {
				v.B = 230
			}
			img.Set(x, y, v)
		}
	}
	return img
}

// wanChildEnv carries BenchmarkWanVsSDCLI's run to its child process.
const wanChildEnv = "SDTOOL_WAN_CHILD"

// wanChildSpec is the part of a wanParityRun the child needs.
type wanChildSpec struct {
	DiT, VAE                     string
	Size, Frames, Steps, Threads int
	Seed                         uint64
	CFG, Shift                   float32
	// HighDiT, HighSteps and HighCFG are Wan 2.2 A14B's high-noise expert.
	HighDiT   string
	HighSteps int
	HighCFG   float32
}

// TestWanGenerateChild is BenchmarkWanVsSDCLI's child process: it renders
// the video in $SDTOOL_WAN_CHILD and prints its seconds per step, so that
// the parent reads the child's peak memory alone.
func TestWanGenerateChild(t *testing.T) {
	spec := os.Getenv(wanChildEnv)
	if spec == "" {
		t.Skip("runs as BenchmarkWanVsSDCLI's child process")
	}
	var r wanChildSpec
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		t.Fatal(err)
	}
	comps := infer.Components{"diffusion-model": r.DiT, "vae": r.VAE}
	req := infer.Request{Width: r.Size, Height: r.Size, Frames: r.Frames, Steps: r.Steps, CFGScale: r.CFG, Seed: r.Seed,
		RNG: infer.RNGCUDA, Method: infer.Euler, Scheduler: infer.SchedulerDiscrete}
	if r.HighDiT != "" {
		comps["high-noise-diffusion-model"] = r.HighDiT
		req.HighNoise = &infer.HighNoise{Steps: r.HighSteps, CFGScale: r.HighCFG, Method: infer.Euler}
	}
	m, err := infer.Load(comps, inferutil.AsGenerate(infer.LoadOptions{Threads: r.Threads, FlowShift: r.Shift, VAEDecodeOnly: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(inferutil.ChildReport{PerStep: res.Timings.Sampling.Seconds() / float64(res.Timings.Steps)})
	fmt.Printf("CHILD %s\n", b)
}

// BenchmarkWanVsSDCLI alternates one sd-cli run and one sdtool run (each
// in a fresh process) of the same Wan video (SDTOOL_WAN_PARITY_DIR keeps
// the files; 5 frames of 64x64, Euler with guidance, 2 threads) and reports
// both sides' seconds per step and peak RSS and their ratios, measured in
// one run. SDTOOL_WAN_BENCH_VARIANT picks the model: t2v (the default, Wan
// 2.1 T2V on synth.WanParity's q8_0 DiT, 2 steps), a14b (Wan 2.2 A14B's two
// q4_0 experts, 1 high-noise step and 2 low-noise steps) or ti2v (TI2V-5B
// in q4_0 with Wan 2.2's VAE, 2 steps). SDTOOL_WAN_BENCH_DIT and
// SDTOOL_WAN_BENCH_VAE replace the files (a quantized DiT that quantize
// wrote, say).
func BenchmarkWanVsSDCLI(b *testing.B) {
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		b.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	r := wanBenchRun(b)
	spec, _ := json.Marshal(wanChildSpec{DiT: r.dit, VAE: r.vae, Size: r.size, Frames: r.frames, Steps: r.steps, Threads: r.threads,
		Seed: r.seed, CFG: r.cfg, Shift: r.shift, HighDiT: r.highDiT, HighSteps: r.highSteps, HighCFG: r.highCFG})
	inferutil.BenchVsSDCLI(b, bin, inferutil.SDCLIBench{Args: r.sdcliArgs(filepath.Join(b.TempDir(), "sd_%03d.png")),
		Steps: r.steps + r.highSteps, Child: "TestWanGenerateChild", Env: wanChildEnv, Spec: spec})
}

// wanBenchRun is the run SDTOOL_WAN_BENCH_VARIANT names, with the files
// SDTOOL_WAN_BENCH_DIT and SDTOOL_WAN_BENCH_VAE give in place of its own.
func wanBenchRun(b *testing.B) wanParityRun {
	dit, vae := os.Getenv("SDTOOL_WAN_BENCH_DIT"), os.Getenv("SDTOOL_WAN_BENCH_VAE")
	files := func(c synth.Wan, name string) (string, string) {
		if dit != "" && vae != "" {
			return dit, vae
		}
		d, v := wanParityFiles(b, c, name)
		return cmp.Or(dit, d), cmp.Or(vae, v)
	}
	r := wanParityRun{size: 64, frames: 5, steps: 2, threads: 2, seed: 42, cfg: 6, shift: 5}
	switch v := os.Getenv("SDTOOL_WAN_BENCH_VARIANT"); v {
	case "", "t2v":
		r.dit, r.vae = files(synth.WanParity, "wan-parity")
	case "a14b":
		r = wanA14BRun(b)
		r.dit, r.vae = cmp.Or(dit, r.dit), cmp.Or(vae, r.vae)
	case "ti2v":
		r.dit, r.vae = files(synth.WanTI2VParity, "wan-ti2v-parity-q4")
	default:
		b.Fatalf("SDTOOL_WAN_BENCH_VARIANT=%q: want t2v, a14b or ti2v", v)
	}
	return r
}

//go:build cgo

package wan_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/infer/metrics"
	wanvae "github.com/sdtool/sdtool/infer/vae/wan"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/quant"
)

// The Wan VAE against sd-cli on several latent frames. sd-cli cannot
// decode a latent it is given, so both programs get a Wan 2.1 DiT of
// zeros: it predicts zero velocity, Euler leaves the seeded noise as it is,
// and each program's frames are its VAE's decoding of the same noise. The
// VAE has full widths (sd.cpp fixes them) and random weights.

// writeTensors writes a safetensors file of tensors whose data data gives.
func writeTensors(tb testing.TB, path string, ts []formats.Tensor, data func(i int) io.Reader) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w, err := safetensors.NewWriter(f, ts, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range ts {
		if _, err := io.Copy(w, data(i)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

// writeZeroWan writes a Wan 2.1 T2V 1.3B DiT (synth's tensors, all 30
// blocks: sd.cpp knows Wan by its depth) whose every value is zero, so
// that it predicts zero velocity whatever its input; zero bytes are zeros
// in q2_K too, which keeps its 1.3B parameters small.
func writeZeroWan(tb testing.TB, path string) {
	tb.Helper()
	specs, err := synth.Tensors(synth.Spec{Arch: "wan", DType: formats.F32})
	if err != nil {
		tb.Fatal(err)
	}
	ts := make([]formats.Tensor, len(specs))
	var meta formats.Metadata
	for i, s := range specs {
		ts[i] = formats.Tensor{Name: s.Name, Type: formats.F32, Shape: infer.FoldDims(s.Shape)}
		if len(s.Shape) == 2 && strings.HasSuffix(s.Name, ".weight") {
			ts[i].Type = formats.Q2_K
		}
		if len(s.Shape) > 4 { // the 5-D patch embedding, as ComfyUI-GGUF records it
			dims := make([]int32, len(s.Shape))
			for j, d := range s.Shape {
				dims[j] = int32(d)
			}
			meta = append(meta, formats.KV{Key: gguf.OrigShapePrefix + s.Name, Type: formats.TypeArray,
				Value: formats.Array{Elem: formats.TypeInt32, Values: dims}})
		}
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w, err := gguf.NewWriter(f, ts, meta, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range ts {
		n, err := ts[i].Type.Bytes(ts[i].Shape)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := io.CopyN(w, zeroReader{}, n); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

// zeroReader reads zeros forever.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// writeWanVAEFile writes wanVAETestWeights under ComfyUI's names (no prefix).
func writeWanVAEFile(tb testing.TB, path string, cfg *wanvae.WanVAEConfig, dec, enc int) {
	tb.Helper()
	w := inferutil.WanVAETestWeights(rand.New(rand.NewPCG(47, 48)), cfg, dec, enc)
	names := make([]string, 0, len(w))
	for n := range w {
		names = append(names, n)
	}
	slices.Sort(names)
	ts := make([]formats.Tensor, len(names))
	for i, n := range names {
		ts[i] = formats.Tensor{Name: strings.TrimPrefix(n, infer.VAEPfx), Type: w[n].Typ, Shape: w[n].Shape}
	}
	writeTensors(tb, path, ts, func(i int) io.Reader {
		tw := w[names[i]]
		var b []byte
		if tw.Typ == formats.F16 {
			b = make([]byte, 2*len(tw.Data))
			quant.F32ToF16Row(b, tw.Data)
		} else {
			b = make([]byte, 0, 4*len(tw.Data))
			for _, v := range tw.Data {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			}
		}
		return bytes.NewReader(b)
	})
}

// wanVAEParity is the comparison: 9 frames (3 latent frames, so that the
// caches of a chunk after the second are checked) of 16x16 (small, for
// CI, whose ggml lacks SIMD kernels), one step.
const wanVAEParitySize, wanVAEParityFrames, wanVAEParitySeed = 16, 9, 42

func TestWanVAEMatchesSDCLI(t *testing.T) {
	longtest.Skip(t, "the Wan VAE's parity against sd-cli")
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		t.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	inferutil.RequireParityBuild(t)
	dir := t.TempDir()
	dit, vae := filepath.Join(dir, "wan-zero-q2_k.gguf"), filepath.Join(dir, "wan_2.1_vae.safetensors")
	writeZeroWan(t, dit)
	writeWanVAEFile(t, vae, &wanvae.WanVAEConfig{ZDim: 16, Pixels: 3, Patch: 1}, 96, 96)
	out := filepath.Join(dir, "sdcli_%03d.png")
	runWanSDCLI(t, bin, dit, vae, out)
	compareWanFrames(t, dit, vae, out)
}

// runWanSDCLI renders the parity clip with sd-cli into the frames out names.
func runWanSDCLI(tb testing.TB, bin, dit, vae, out string) {
	tb.Helper()
	size := strconv.Itoa(wanVAEParitySize)
	args := []string{"-M", "vid_gen", "--diffusion-model", dit, "--vae", vae, "-p", "", "-W", size, "-H", size,
		"--video-frames", strconv.Itoa(wanVAEParityFrames), "--steps", "1", "-s", strconv.Itoa(wanVAEParitySeed),
		"--sampling-method", "euler", "--cfg-scale", "1", "--flow-shift", "3", "--rng", "cuda", "-t", "2", "-o", out, "-v"}
	cmd := exec.Command(bin, args...)
	log, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
	}
	tb.Logf("sd-cli peak RSS %d MiB", inferutil.MaxRSS(cmd.ProcessState)>>20)
}

// compareWanFrames renders the parity clip here and compares each frame
// with sd-cli's.
func compareWanFrames(t *testing.T, dit, vae, out string) {
	t.Helper()
	m, err := infer.Load(infer.Components{"diffusion-model": dit, "vae": vae}, infer.LoadOptions{Threads: 2, FlowShift: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(infer.Request{Width: wanVAEParitySize, Height: wanVAEParitySize, Frames: wanVAEParityFrames,
		Steps: 1, CFGScale: 1, Seed: wanVAEParitySeed, RNG: infer.RNGCUDA, Method: infer.Euler, Scheduler: m.Family.Defaults.Scheduler})
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := infer.FrameImages(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != wanVAEParityFrames {
		t.Fatalf("%d frames, want %d", len(imgs), wanVAEParityFrames)
	}
	for i, img := range imgs {
		p, err := metrics.PSNR(img, inferutil.ReadPNGFile(t, fmt.Sprintf(out, i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("frame %d: %.1f dB", i, p)
		if p < 50 {
			t.Errorf("frame %d: PSNR %.1f dB against sd-cli, want >= 50", i, p)
		}
	}
}

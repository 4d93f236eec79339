package quantize

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
)

// comfyLoaderTypes are the --type values of every ComfyUI format sdtool writes.
var comfyLoaderTypes = []string{"int8", "int8_convrot", "fp8_e4m3", "nvfp4", "mxfp8", "convrot_w4a4", "asym_w4a8_int8"}

// comfyCPUActivations says, for each marker format, whether generate's
// --runtime comfyui quantizes a layer's activations on a CPU (INT8 as
// W8A8, asym_w4a8_int8 on its INT8 grid, convrot_w4a4 with int4
// activations) or multiplies the dequantized weight in float.
var comfyCPUActivations = map[string]bool{
	"int8_tensorwise": true, "asym_w4a8_int8": true, "convrot_w4a4": true,
	"float8_e4m3fn": false, "nvfp4": false, "mxfp8": false,
}

// TestComfyUILoaderFlux loads the realistic-weights Flux layout
// (synth.FluxBench) in every ComfyUI format through ComfyUI's own
// checkpoint loader and layers (testdata/comfy_loader.py): the model must be
// detected as Flux, no key may be missing or unexpected, every marked layer
// must load quantized in its format, each layer's output through
// ComfyUI's runtime must be within 10% of ComfyUI quantizing the layer
// itself, and ComfyUI must run each format on this CPU as generate's
// --runtime comfyui does (comfyCPUActivations).
func TestComfyUILoaderFlux(t *testing.T) {
	root, comfy := comfyUIEnv(t)
	dir := chrootTemp(t, root, "sdtool-loader-flux-")
	src := filepath.Join(dir, "flux.safetensors")
	if err := synth.FluxBench.WriteSingle(src); err != nil {
		t.Fatal(err)
	}
	// The reference weights as F32, as sdtool reads them.
	if err := writeF32Safetensors(src, filepath.Join(dir, "src.safetensors")); err != nil {
		t.Fatal(err)
	}
	comfyLoader(t, root, comfy, dir, src, "Flux")
}

// TestComfyUILoaderWan does the same for a Wan 2.1 t2v layout (its 5-D
// patch embedding among the keys ComfyUI's WAN21 model must take) and a
// Wan 2.2 TI2V-5B one (48 latent channels, ComfyUI's WAN22) through
// comfy.sd.load_diffusion_model.
func TestComfyUILoaderWan(t *testing.T) {
	root, comfy := comfyUIEnv(t)
	t.Run("t2v", func(t *testing.T) {
		dir := chrootTemp(t, root, "sdtool-loader-wan-")
		src := filepath.Join(dir, "src.safetensors")
		if err := synth.Write(src, wanComfySpec); err != nil {
			t.Fatal(err)
		}
		comfyLoader(t, root, comfy, dir, src, "WAN21")
	})
	t.Run("ti2v-5b", func(t *testing.T) {
		dir := chrootTemp(t, root, "sdtool-loader-wan22-")
		// Two 128-wide heads: ComfyUI's Wan takes its head count from the width.
		wan := synth.Wan{Hidden: 256, FF: 512, Blocks: 1, Channels: 48, V22: true, VAEDec: 8, VAEEnc: 8, Seed: 9, Type: formats.F16}
		var b bytes.Buffer
		if err := wan.EncodePart(&b, "safetensors", "diffusion-model"); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(dir, "src.safetensors")
		if err := os.WriteFile(src, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		comfyLoader(t, root, comfy, dir, src, "WAN22")
	})
}

// comfyUIEnv returns the chroot (SDTOOL_COMFY_CHROOT) and the ComfyUI tree
// (SDTOOL_COMFYUI, see testdata/fetch_comfyui.md), skipping without them.
func comfyUIEnv(t *testing.T) (root, comfy string) {
	t.Helper()
	longtest.Skip(t, "ComfyUI's loader")
	root, comfy = os.Getenv("SDTOOL_COMFY_CHROOT"), os.Getenv("SDTOOL_COMFYUI")
	if root == "" || comfy == "" {
		t.Skip("SDTOOL_COMFY_CHROOT (a debootstrap trixie chroot with python3-torch, python3-einops and comfy-kitchen) or SDTOOL_COMFYUI (a ComfyUI tree, testdata/fetch_comfyui.md) is not set")
	}
	if _, err := os.Stat(filepath.Join(comfy, "comfy", "sd.py")); err != nil {
		t.Fatalf("SDTOOL_COMFYUI=%s: %v", comfy, err)
	}
	return root, comfy
}

// chrootTemp makes a folder under the chroot's /tmp, removed after the test.
func chrootTemp(t *testing.T, root, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp(filepath.Join(root, "tmp"), pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// comfyLoader quantizes src (in dir, a folder of the chroot at root) to
// every ComfyUI type and runs testdata/comfy_loader.py on the files inside
// the chroot, with the ComfyUI tree comfy bind-mounted there and /proc
// mounted (ComfyUI reads the memory size), both in a mount namespace of
// their own that ends with the command. dir/src.safetensors holds the
// reference weights; model is the class ComfyUI must detect.
func comfyLoader(t *testing.T, root, comfy, dir, src, model string) {
	t.Helper()
	inner := "/tmp/" + filepath.Base(dir)
	copyScripts(t, dir, "comfy_boot.py", "comfy_loader.py")
	if err := os.Mkdir(filepath.Join(dir, "comfyui"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{inner + "/comfy_loader.py", inner + "/comfyui", "/opt/kitchen", inner + "/src.safetensors"}
	for _, typ := range comfyLoaderTypes {
		out := filepath.Join(dir, typ+".safetensors")
		run(t, Options{Input: src, Output: out, Type: typ}, pipeline.Options{})
		args = append(args, inner+"/"+typ+".safetensors")
	}
	sh := `mount --bind "$1" "$2/$3/comfyui" && mount -t proc proc "$2/proc" && root=$2 && shift 3 && exec chroot "$root" python3 "$@"`
	cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", sh, "sh", comfy, root, inner}, args...)...)
	out, err := cmd.Output()
	files := checkLoaderLines(t, out, model)
	if err != nil || files != len(comfyLoaderTypes) {
		t.Errorf("comfy_loader.py: %v, %d files checked of %d; stderr: %s", err, files, len(comfyLoaderTypes), stderrOf(err))
	}
}

// loaderLine is one JSON line of comfy_loader.py: a file's or a layer's.
type loaderLine struct {
	File, Layer, Problem, Model, Format string
	Problems                            []string
	Markers                             int
	Quantized                           int     `json:"quantized_layers"`
	Ratio                               float64 `json:"ratio"`
	VsDequantized                       float64 `json:"runtime_vs_dequantized"`
}

// checkLoaderLines checks comfy_loader.py's output lines: every file
// detected as model with all its markers loaded quantized and no problem,
// every layer within 1.10 of ComfyUI's own error and run by ComfyUI on
// this CPU as generate's --runtime comfyui runs it (comfyCPUActivations:
// the dequantized product, or activations quantized too). It returns the
// number of files reported.
func checkLoaderLines(t *testing.T, out []byte, model string) int {
	t.Helper()
	files, layers := 0, 0
	spread := map[string][2]float64{} // format: smallest and largest runtime_vs_dequantized
	for _, line := range bytes.Split(out, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("{")) {
			continue // torch's and UCX's chatter
		}
		var r loaderLine
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%v in %s", err, line)
		}
		switch {
		case r.File != "":
			files++
			if len(r.Problems) > 0 || r.Model != model || r.Markers == 0 || r.Quantized != r.Markers {
				t.Errorf("%s", line)
			}
		case r.Layer != "":
			layers++
			if r.Problem != "" || r.Ratio > 1.10 {
				t.Errorf("%s", line)
			}
			quantized, known := comfyCPUActivations[r.Format]
			if !known || quantized != (r.VsDequantized > 1e-3) {
				t.Errorf("%s: ComfyUI's runtime is %g from the dequantized product; sdtool runs it with quantized activations: %v", r.Layer, r.VsDequantized, quantized)
			}
			s, seen := spread[r.Format]
			if !seen {
				s = [2]float64{r.VsDequantized, r.VsDequantized}
			}
			spread[r.Format] = [2]float64{min(s[0], r.VsDequantized), max(s[1], r.VsDequantized)}
		}
	}
	t.Logf("%d files, %d layers checked through ComfyUI; runtime against dequantized product per format: %v", files, layers, spread)
	return files
}

// copyScripts copies the named files of testdata into dir.
func copyScripts(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

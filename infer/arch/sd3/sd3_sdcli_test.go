//go:build cgo

package sd3

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/synth"
)

// SD 3.5 image parity against sd-cli (SDTOOL_SDCLI; skipped without it) on
// synth.SD3ParityMedium and SD3ParityLarge written as component files
// (--diffusion-model, --clip_l, --clip_g, --vae), with a real prompt
// through both CLIPs (CLIP's real vocabulary on both sides) and a negative
// pass (CFG 4.5).

// sd3ParityRun is one SD3 generation's settings, pinned on both sides.
type sd3ParityRun struct {
	Parts   map[string]string
	Prompt  string
	Size    int
	Steps   int
	Seed    uint64
	Threads int
	CFG     float32
}

func (r sd3ParityRun) sdcliArgs(out string) []string {
	var args []string
	for _, flag := range synth.SD3Parts {
		if p, ok := r.Parts[flag]; ok {
			args = append(args, "--"+flag, p)
		}
	}
	return append(args, "-p", r.Prompt, "-W", strconv.Itoa(r.Size), "-H", strconv.Itoa(r.Size),
		"--steps", strconv.Itoa(r.Steps), "-s", strconv.FormatUint(r.Seed, 10), "--sampling-method", "euler",
		"--scheduler", "discrete", "--cfg-scale", strconv.FormatFloat(float64(r.CFG), 'g', -1, 32),
		"--rng", "cuda", "-t", strconv.Itoa(r.Threads), "-b", "1", "-o", out, "-v")
}

func (r sd3ParityRun) components() infer.Components {
	c := infer.Components{}
	for flag, p := range r.Parts {
		c[flag] = p
	}
	return c
}

func (r sd3ParityRun) request() infer.Request {
	return infer.Request{Prompt: r.Prompt, Width: r.Size, Height: r.Size, Steps: r.Steps, CFGScale: r.CFG,
		Seed: r.Seed, RNG: infer.RNGCUDA, Method: infer.Euler, Scheduler: infer.SchedulerDiscrete}
}

// sd3Merges finds CLIP's real merges (shared/data beside the repository
// or beside the worktree folder), skipping without them.
func sd3Merges(tb testing.TB) string {
	tb.Helper()
	for _, p := range []string{inferutil.SharedCLIPMerges, filepath.Join("..", "..", "..", "..", "..", "shared", "data", "clip_bpe_merges.txt")} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	tb.Skipf("no CLIP vocabulary at %s", inferutil.SharedCLIPMerges)
	return ""
}

// sd3ParityModel writes c's component files into a temporary folder, or
// into SDTOOL_SD3_PARITY_DIR once and reuses them.
func sd3ParityModel(tb testing.TB, c synth.SD3, name string) map[string]string {
	tb.Helper()
	dir := os.Getenv("SDTOOL_SD3_PARITY_DIR")
	if dir == "" {
		dir = tb.TempDir()
	} else {
		parts := map[string]string{}
		for _, flag := range []string{"diffusion-model", "clip_l", "clip_g", "vae"} {
			if p := filepath.Join(dir, name+"-"+flag+".safetensors"); fileExists(p) {
				parts[flag] = p
			}
		}
		if len(parts) == 4 {
			return parts
		}
	}
	parts, err := c.WriteParts(dir, name, "safetensors")
	if err != nil {
		tb.Fatal(err)
	}
	return parts
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func sd3Run(tb testing.TB, c synth.SD3, name string) sd3ParityRun {
	return sd3ParityRun{Parts: sd3ParityModel(tb, c, name), Prompt: "a photo of a cat", Size: 128, Steps: 2, Seed: 42, Threads: 2, CFG: 4.5}
}

func testSD3Parity(t *testing.T, c synth.SD3, name string) {
	bin := inferutil.ChromaSDCLI(t)
	merges := sd3Merges(t)
	r := sd3Run(t, c, name)
	out := filepath.Join(t.TempDir(), "sdcli.png")
	if log, err := exec.Command(bin, r.sdcliArgs(out)...).CombinedOutput(); err != nil {
		t.Fatalf("sd-cli: %v\n%s", err, inferutil.Tail(log))
	}
	img, _ := inferutil.GenerateParts(t, r.components(), infer.LoadOptions{Threads: r.Threads, Tokenizers: map[string]string{"clip": merges}}, r.request())
	psnr := inferutil.ComparePNG(t, out, img, "SDTOOL_SD3_PARITY_DIR", name)
	t.Logf("sdtool vs sd-cli, %s, 128x128, %d euler steps, cfg %g: PSNR %.2f dB", name, r.Steps, r.CFG, psnr)
	if psnr < 50 {
		t.Errorf("PSNR %.2f dB against sd-cli, want at least 50", psnr)
	}
}

func TestSD35MediumMatchesSDCLI(t *testing.T) {
	testSD3Parity(t, synth.SD3ParityMedium, "sd35-medium-parity")
}

func TestSD35LargeMatchesSDCLI(t *testing.T) {
	testSD3Parity(t, synth.SD3ParityLarge, "sd35-large-parity")
}

// sd3ChildEnv carries an sd3ParityRun to TestSD3GenerateChild.
const sd3ChildEnv = "SDTOOL_SD3_CHILD"

// TestSD3GenerateChild is BenchmarkSD3VsSDCLI's child process: one
// generation of the run in $SDTOOL_SD3_CHILD, printing its seconds per step.
func TestSD3GenerateChild(t *testing.T) {
	spec := os.Getenv(sd3ChildEnv)
	if spec == "" {
		t.Skip("runs as BenchmarkSD3VsSDCLI's child process")
	}
	var r sd3ParityRun
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		t.Fatal(err)
	}
	inferutil.ReportChild(t, r.components(), infer.LoadOptions{Threads: r.Threads, Tokenizers: map[string]string{"clip": sd3Merges(t)}}, r.request())
}

// BenchmarkSD3VsSDCLI alternates one sd-cli run and one sdtool run (each
// in a fresh process, TestSD3GenerateChild) of the 3.5 medium parity run
// and reports both sides' seconds per step and peak RSS and their ratios.
func BenchmarkSD3VsSDCLI(b *testing.B) {
	bin := inferutil.ChromaSDCLI(b)
	r := sd3Run(b, synth.SD3ParityMedium, "sd35-medium-parity")
	spec, _ := json.Marshal(r)
	inferutil.BenchVsSDCLI(b, bin, inferutil.SDCLIBench{Args: r.sdcliArgs(filepath.Join(b.TempDir(), "sdcli.png")), Steps: r.Steps,
		Child: "TestSD3GenerateChild", Env: sd3ChildEnv, Spec: spec})
}

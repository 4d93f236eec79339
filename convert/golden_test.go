package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
)

// goldenDir is shared/data/sdcli-golden beside the repository.
func goldenDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "shared", "data", "sdcli-golden")
	if _, err := os.Stat(filepath.Join(dir, "cases.txt")); err != nil {
		t.Skipf("sd-cli golden outputs absent (%s)", dir)
	}
	return dir
}

// goldenCase is one line of cases.txt: the sd-cli flags that made NAME.gguf.
type goldenCase struct {
	name  string
	flags map[string][]string
}

func readCases(t *testing.T, dir string) []goldenCase {
	raw, err := os.ReadFile(filepath.Join(dir, "cases.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []goldenCase
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		name, cmd, _ := strings.Cut(line, ": ")
		args := strings.Fields(cmd)[3:] // drop "sd-cli -M convert"
		c := goldenCase{name: name, flags: map[string][]string{}}
		for i := 0; i+1 < len(args); i += 2 {
			c.flags[args[i]] = append(c.flags[args[i]], args[i+1])
		}
		out = append(out, c)
	}
	return out
}

// convertLikeSDCLI runs the conversion the way `sdtool convert` does for
// the given sd-cli flags and returns the output bytes.
func convertLikeSDCLI(t *testing.T, dir string, c goldenCase) []byte {
	t.Helper()
	cfg := &Options{Inputs: map[string]string{}, Output: filepath.Join(t.TempDir(), c.name+".gguf")}
	for flag, comp := range map[string]string{"-m": "model", "--diffusion-model": "diffusion-model", "--vae": "vae", "--clip_l": "clip_l"} {
		if v := c.flags[flag]; len(v) > 0 {
			cfg.Inputs[comp] = filepath.Join(dir, v[0])
		}
	}
	if v := c.flags["--type"]; len(v) > 0 {
		cfg.Type = v[0]
	}
	cfg.Rules = strings.Join(c.flags["--tensor-type-rules"], ",")
	for _, f := range c.flags["--imat-in"] {
		cfg.Imatrix = append(cfg.Imatrix, filepath.Join(dir, f))
	}
	if _, err := run(cfg, pipeline.Options{Threads: 2}); err != nil {
		if errors.Is(err, quant.ErrNoCodec) {
			t.Skipf("%s: %v", c.name, err)
		}
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.Output)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenSDCLI(t *testing.T) {
	dir := goldenDir(t)
	for _, c := range readCases(t, dir) {
		t.Run(c.name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(dir, c.name+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			got := convertLikeSDCLI(t, dir, c)
			if !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes, sd-cli wrote %d; first difference at %d", c.name, len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestDryRunWritesNothing(t *testing.T) {
	dir := goldenDir(t)
	out := filepath.Join(t.TempDir(), "x.gguf")
	cfg := &Options{Inputs: map[string]string{"model": filepath.Join(dir, "input.safetensors")}, Output: out, Type: "q4_K"}
	plan, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("dry run wrote %s", out)
	}
	var b bytes.Buffer
	if err := plan.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"model.diffusion_model.blocks.0.attn.to_q.weight", "q4_K",
		"row of 320 is not a multiple of the q4_K block size 256",
		"5-D shape [8 4 1 2 2] folded to [32 1 2 2]", "ComfyUI int8_tensorwise weight", "bits per weight",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, text)
		}
	}
}

func TestRefusals(t *testing.T) {
	dir := goldenDir(t)
	in := filepath.Join(dir, "input.safetensors")
	tmp := t.TempDir()
	cases := []struct {
		cfg   Options
		force bool
		want  string
	}{
		{Options{Inputs: map[string]string{"model": in}, Output: filepath.Join(tmp, "a.gguf"), Type: "q8_K"}, false, "cannot be written"},
		{Options{Inputs: map[string]string{"model": in}, Output: filepath.Join(tmp, "a.gguf"), Type: "fp8_e4m3"}, false, "quantize"},
		{Options{Inputs: map[string]string{"model": in}, Output: filepath.Join(tmp, "a.gguf"), Rules: "x(=q4_K"}, false, "pattern"},
		{Options{Inputs: map[string]string{"model": in}, Output: filepath.Join(tmp, "a.safetensors"), Type: "q4_K"}, false, "safetensors cannot hold"},
		{Options{Inputs: map[string]string{"model": in}, Output: in}, true, "input"},
		{Options{Inputs: map[string]string{"model": filepath.Join(tmp, "missing.safetensors")}, Output: filepath.Join(tmp, "a.gguf")}, false, "missing.safetensors"},
		{Options{Output: filepath.Join(tmp, "a.gguf")}, false, "no input"},
	}
	for _, c := range cases {
		_, err := run(&c.cfg, pipeline.Options{Force: c.force})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.cfg, err, c.want)
		}
		if _, err := os.Stat(filepath.Join(tmp, "a.gguf")); err == nil {
			t.Errorf("%+v left an output", c.cfg)
		}
	}
	entries, _ := os.ReadDir(tmp)
	if len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

// --dequantize decodes the ComfyUI int8_tensorwise module of the golden
// input (q·scale per row) instead of keeping it as sd-cli does.
func TestDequantizeInt8Module(t *testing.T) {
	dir := goldenDir(t)
	in := filepath.Join(dir, "input.safetensors")
	out := filepath.Join(t.TempDir(), "d.gguf")
	plan, err := run(&Options{Inputs: map[string]string{"model": in}, Output: out, Dequantize: true}, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range plan.Outputs {
		if strings.Contains(r.Name, "blocks.2.q.weight_scale") || strings.Contains(r.Name, "comfy_quant") {
			t.Errorf("aux tensor %s kept", r.Name)
		}
	}
	src, err := formats.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	w, _ := formats.Find(src, "model.diffusion_model.blocks.2.q.weight")
	s, _ := formats.Find(src, "model.diffusion_model.blocks.2.q.weight_scale")
	wb, _ := formats.ReadTensor(src, &w)
	sb, _ := formats.ReadTensor(src, &s)
	dst, err := formats.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	o, ok := formats.Find(dst, "model.diffusion_model.blocks.2.q.weight")
	if !ok || o.Type != formats.F32 {
		t.Fatalf("dequantized weight: %+v", o)
	}
	ob, _ := formats.ReadTensor(dst, &o)
	for i := range wb {
		scale := math.Float32frombits(binary.LittleEndian.Uint32(sb[4*(i/256):]))
		want := float32(int8(wb[i])) * scale
		if got := math.Float32frombits(binary.LittleEndian.Uint32(ob[4*i:])); got != want {
			t.Fatalf("element %d: %v, want %v", i, got, want)
		}
	}
}

// run plans opts and writes the plan with ro, as `sdtool convert` does.
func run(opts *Options, ro pipeline.Options) (*pipeline.Plan, error) {
	plan, err := Plan(opts)
	if err != nil {
		return nil, err
	}
	defer plan.Close()
	return plan, pipeline.Run(context.Background(), plan, ro)
}

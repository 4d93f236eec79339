package quantize

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/inspect"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// TestQuantizeBlockFormats writes the tiny SD1 model as nvfp4, mxfp8,
// convrot_w4a4 and asym_w4a8_int8 and checks one module's tensors, dtypes,
// shapes and marker, the layers kept float and why, the ComfyUI version in
// the plan, and that requantizing the file to F16 decodes it close to the
// source (a wrong layout would not be).
func TestQuantizeBlockFormats(t *testing.T) {
	const mod = "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.ff.net.2" // [32, 128]
	src := mustOpen(t, tinyPath)
	for _, c := range []struct {
		typ, json, version string
		tensors            map[string][]int64 // suffix: shape
		types              []formats.DType    // in the order of tensors' sorted suffixes
		maxErr             float64
	}{
		{"nvfp4", `{"format": "nvfp4"}`, "PR #11635",
			map[string][]int64{".weight": {32, 64}, ".weight_scale": {128, 8}, ".weight_scale_2": {}},
			[]formats.DType{formats.U8, formats.F8_E4M3, formats.F32}, 0.12},
		{"mxfp8", `{"format": "mxfp8"}`, "v0.18.0",
			map[string][]int64{".weight": {32, 128}, ".weight_scale": {128, 4}},
			[]formats.DType{formats.F8_E4M3, formats.U8}, 0.04},
		{"w4a4", `{"format": "convrot_w4a4", "convrot_groupsize": 64}`, "v0.30.0",
			map[string][]int64{".weight": {32, 64}, ".weight_scale": {32}},
			[]formats.DType{formats.I8, formats.F32}, 0.2},
		{"W4A8", `{"format": "asym_w4a8_int8", "group_size": 16, "convrot_groupsize": 64}`, "v0.31.0",
			map[string][]int64{".weight": {32, 64}, ".weight_codebook": {16}, ".weight_s_channel": {32}, ".weight_s_rel": {32, 8}},
			[]formats.DType{formats.I8, formats.F32, formats.F32, formats.F8_E4M3}, 0.12},
	} {
		out := filepath.Join(t.TempDir(), c.typ+".safetensors")
		res := run(t, Options{Input: tinyPath, Output: out, Type: c.typ, GroupSize: 64, Targets: []string{"comfyui"}}, pipeline.Options{})
		g := mustOpen(t, out)
		suffixes := make([]string, 0, len(c.tensors))
		for s := range c.tensors {
			suffixes = append(suffixes, s)
		}
		slices.Sort(suffixes)
		for i, s := range suffixes {
			if tt := find(t, g, mod+s); tt.Type != c.types[i] || !slices.Equal(tt.Shape, c.tensors[s]) {
				t.Errorf("%s: %s%s is %s %v, want %s %v", c.typ, mod, s, tt.Type, tt.Shape, c.types[i], c.tensors[s])
			}
		}
		mk := find(t, g, mod+".comfy_quant")
		if raw, _ := formats.ReadTensor(g, &mk); string(raw) != c.json {
			t.Errorf("%s: marker %q, want %q", c.typ, raw, c.json)
		}
		if !strings.Contains(strings.Join(res.Consumers[0].Notes, "\n"), c.version) {
			t.Errorf("%s: the comfyui notes %q do not name %s", c.typ, res.Consumers[0].Notes, c.version)
		}
		mods, err := comfyquant.Detect(g)
		if err != nil || len(mods) == 0 {
			t.Fatalf("%s: Detect: %d modules, %v", c.typ, len(mods), err)
		}
		if c.typ == "w4a4" {
			// in = 32 rows are not a multiple of comfy-kitchen's int4 group of 64.
			if r := rowOf(t, res, "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.attn1.to_q.weight"); !strings.Contains(r.Reason, "kept float") {
				t.Errorf("w4a4: attn1.to_q (in=32): %q, want kept float", r.Reason)
			}
		}
		back := filepath.Join(t.TempDir(), c.typ+"-back.gguf")
		run(t, Options{Input: out, Output: back, Type: "F16"}, pipeline.Options{})
		d, err := inspect.Diff(src, mustOpen(t, back), inspect.DiffOptions{Filters: []*regexp.Regexp{regexp.MustCompile(`diffusion_model\..*(attn|ff)`)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Missing)+len(d.Extra) > 0 || *d.Totals.RelError > c.maxErr {
			t.Errorf("%s -> f16: missing %v extra %v, error %v (bound %v)", c.typ, d.Missing, d.Extra, *d.Totals.RelError, c.maxErr)
		}
	}
}

// TestQuantizeNVFP4Choices: a .gguf output keeps ggml's nvfp4, --imatrix
// is taken by nvfp4 and refused by the rotated formats.
func TestQuantizeNVFP4Choices(t *testing.T) {
	dir := t.TempDir()
	// ggml's experimental nvfp4 is refused, for reasons of its own.
	ggmlOpts := Options{Input: tinyPath, Output: filepath.Join(dir, "a.gguf"), Type: "nvfp4"}
	if _, err := quantizeRun(t.Context(), &ggmlOpts, pipeline.Options{}, true); err == nil || !strings.Contains(err.Error(), "ggml") {
		t.Errorf("nvfp4 to .gguf: %v, want ggml's nvfp4", err)
	}
	res := run(t, Options{Input: tinyPath, Output: filepath.Join(dir, "b.safetensors"), Type: "nvfp4", Imatrix: []string{"../testdata/tiny-sd1.imatrix.dat"}}, pipeline.Options{})
	if r := rowOf(t, res, "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.ff.net.2.weight"); !r.Imatrix {
		t.Errorf("nvfp4 with --imatrix: %q", r.Reason)
	}
	opts := Options{Input: tinyPath, Output: filepath.Join(dir, "c.safetensors"), Type: "convrot_w4a4", Imatrix: []string{"../testdata/tiny-sd1.imatrix.dat"}}
	if _, err := quantizeRun(t.Context(), &opts, pipeline.Options{}, true); err == nil || !strings.Contains(err.Error(), "importance") {
		t.Errorf("convrot_w4a4 with --imatrix: %v", err)
	}
}

// TestComfyOracle checks the four formats against ComfyUI's own reference
// code: comfy-kitchen's eager backend, run by Debian's python3-torch in a
// chroot named by SDTOOL_COMFY_CHROOT (with comfy-kitchen's comfy_kitchen
// package at /opt/kitchen/comfy_kitchen inside it). For every module it
// requires sdtool's decode to equal kitchen's, every weight byte and scale
// to equal kitchen quantizing the same source weight, and the layer's
// output error to be within 10% of ComfyUI's own (testdata/comfy_oracle.py).
// Skipped without the chroot; it needs root for chroot(8).
func TestComfyOracle(t *testing.T) {
	root := os.Getenv("SDTOOL_COMFY_CHROOT")
	if root == "" {
		t.Skip("SDTOOL_COMFY_CHROOT is not set (a debootstrap trixie chroot with python3-torch and comfy-kitchen)")
	}
	dir, err := os.MkdirTemp(filepath.Join(root, "tmp"), "sdtool-oracle-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	script, _ := os.ReadFile("testdata/comfy_oracle.py")
	if err := os.WriteFile(filepath.Join(dir, "oracle.py"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	// The source as F32 safetensors, so that both sides quantize the same floats.
	srcPath := filepath.Join(dir, "src.safetensors")
	run(t, Options{Input: tinyPath, Output: filepath.Join(dir, "src.gguf"), Type: "F32"}, pipeline.Options{})
	if err := writeF32Safetensors(filepath.Join(dir, "src.gguf"), srcPath); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"nvfp4", "mxfp8", "convrot_w4a4", "asym_w4a8_int8"} {
		q := filepath.Join(dir, typ+".safetensors")
		run(t, Options{Input: srcPath, Output: q, Type: typ, GroupSize: 64}, pipeline.Options{})
		comfyOracle(t, root, dir, "src.safetensors", typ+".safetensors", 1)
	}
}

// comfyOracle runs testdata/comfy_oracle.py (copied into dir, a folder of
// the chroot at root, as oracle.py) on the source and ComfyUI file called
// src and quant in dir, and checks every module's line: its checks passed
// and at least minEqual of the weight bytes and scales equal comfy-kitchen's.
func comfyOracle(t *testing.T, root, dir, src, quant string, minEqual float64) {
	t.Helper()
	inner := "/tmp/" + filepath.Base(dir)
	dec := strings.TrimSuffix(quant, ".safetensors") + "-dec.safetensors"
	if err := writeF32Safetensors(filepath.Join(dir, quant), filepath.Join(dir, dec)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("chroot", root, "python3", inner+"/oracle.py", "/opt/kitchen/comfy_kitchen",
		inner+"/"+src, inner+"/"+quant, inner+"/"+dec)
	outb, err := cmd.Output()
	n := 0
	for _, line := range bytes.Split(outb, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("{")) {
			continue // torch's and UCX's chatter
		}
		var r struct {
			Module     string  `json:"module"`
			OK         bool    `json:"ok"`
			Bytes      float64 `json:"equal_weight_bytes"`
			Scales     float64 `json:"equal_scales"`
			Ratio      float64 `json:"ratio"`
			DecodeDiff float64 `json:"decode_max_rel_diff"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%s: %v in %s", quant, err, line)
		}
		n++
		if !r.OK || r.Bytes < minEqual || r.Scales < minEqual {
			t.Errorf("%s: %s", quant, line)
		} else if r.Bytes < 1 || r.Scales < 1 {
			t.Logf("%s: %s", quant, line)
		}
	}
	if err != nil || n == 0 {
		t.Errorf("%s: oracle: %v, %d modules checked; stderr: %s", quant, err, n, stderrOf(err))
	}
}

func stderrOf(err error) string {
	if e, ok := err.(*exec.ExitError); ok {
		return string(e.Stderr)
	}
	return ""
}

// writeF32Safetensors decodes every float tensor of the model at in
// (ComfyUI modules included, through package tensor) and writes them as
// F32 safetensors at out: the oracle's view of what sdtool reads.
func writeF32Safetensors(in, out string) error {
	m, err := formats.Open(in)
	if err != nil {
		return err
	}
	defer m.Close()
	v, err := tensor.NewView(m)
	if err != nil {
		return err
	}
	var descs []formats.Tensor
	var srcs []*tensor.Source
	for _, s := range v.Sources {
		if !s.Float() || s.Err() != nil {
			continue
		}
		descs = append(descs, formats.Tensor{Name: s.Name, Type: formats.F32, Shape: s.Shape()})
		srcs = append(srcs, s)
	}
	c, _ := formats.CreatorNamed("safetensors")
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := c.New(f, descs, formats.WriteOptions{})
	if err != nil {
		return err
	}
	for _, s := range srcs {
		vals := make([]float32, s.Elements())
		if err := s.Read(vals, 0, &tensor.Scratch{}); err != nil {
			return err
		}
		if _, err := w.Write(convrot.PutScales(nil, vals)); err != nil {
			return err
		}
	}
	return w.Close()
}

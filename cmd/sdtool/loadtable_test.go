package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
)

// loadFamilies are the rows of docs/load-table.md: a family, the source
// it is made from (a committed file, or a synth layout with the real
// tensor names and shapes), and whether it is a full checkpoint (convert
// reads it with -m) or a diffusion model alone (--diffusion-model).
var loadFamilies = []struct {
	family, source string
	full           bool
	quantize       []string // more quantize flags for ComfyUI-GGUF's file
}{
	{"sd1", "../../testdata/tiny-sd1.safetensors", true, nil},
	{"sd1 --reshape-conv", "../../testdata/tiny-sd1.safetensors", true, []string{"--reshape-conv"}},
	{"sdxl", "../../testdata/tiny-sdxl.gguf", true, nil},
	{"sdxl --reshape-conv", "../../testdata/tiny-sdxl.gguf", true, []string{"--reshape-conv"}},
	{"sd3", "layout-sd3-medium", false, nil},
	{"flux", "layout-flux-dev", false, nil},
	{"chroma", "layout-chroma", false, nil},
	{"flux2", "layout-flux2-klein", false, nil},
	{"wan", "layout-wan-t2v", false, nil},
	{"qwen_image", "layout-qwen-image", false, nil},
	{"z_image", "layout-z-image", false, nil},
	{"hidream", "layout-hidream", false, nil},
	{"cosmos", "layout-cosmos", false, nil},
	{"aura", "layout-auraflow", false, nil},
	{"ltxv", "layout-ltxv", false, nil},
	{"hunyuan_video", "layout-hunyuan-video-1.5", false, nil},
}

// comfyArchs is IMG_ARCH_LIST of ComfyUI-GGUF's loader.py (001ffcf0): other
// architecture strings are refused; none (or "pig") means compatibility
// mode, where the loader detects the model from its tensor names.
var comfyArchs = []string{"flux", "sd1", "sdxl", "sd3", "aura", "hidream", "cosmos", "ltxv", "hyvid", "wan", "lumina2", "qwen_image"}

// comfyDequant lists the types ComfyUI-GGUF's dequant.py handles.
var comfyDequant = []string{"F32", "F16", "BF16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "Q6_K", "Q5_K", "Q4_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS"}

const loadTableDoc = "../../docs/load-table.md"

// TestLoadTable builds, for every family of loadFamilies, the GGUF sd.cpp's
// converter writes (convert, sd-cli's bytes) and the one written for
// ComfyUI-GGUF (quantize --type Q8_0), and asks each runtime at hand
// whether it loads them: ComfyUI-GGUF's loader as it reads a file through
// gguf-py (SDTOOL_GGUF_PY; see TestMetaMatchesGGUFPy), whose shapes must
// be the source's torch shapes; sd.cpp's reader (SDTOOL_SDCLI: sd-cli -M
// convert reads every tensor). Cells of runtimes not at hand are left as
// docs/load-table.md has them; SDTOOL_UPDATE_LOADTABLE=1 rewrites the table.
// It takes about 25 s with gguf-py, so it runs with SDTOOL_LONG=1.
func TestLoadTable(t *testing.T) {
	longtest.Skip(t, "the load table: two files per family through each runtime")
	py, sdcli := os.Getenv("SDTOOL_GGUF_PY"), os.Getenv("SDTOOL_SDCLI")
	if py == "" && sdcli == "" {
		t.Skip("neither SDTOOL_GGUF_PY nor SDTOOL_SDCLI is set: no runtime at hand")
	}
	doc, err := os.ReadFile(loadTableDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows := parseLoadTable(string(doc))
	dir := t.TempDir()
	for _, f := range loadFamilies {
		src := f.source
		if !strings.Contains(src, "/") {
			src = filepath.Join(dir, strings.ReplaceAll(f.family, " ", "")+".safetensors")
			if err := synth.Write(src, synth.Spec{Arch: f.source, Seed: 1, DType: formats.F16}); err != nil {
				t.Fatal(err)
			}
		}
		base := strings.ReplaceAll(f.family, " ", "")
		sd, comfy := filepath.Join(dir, base+"-sdcpp.gguf"), filepath.Join(dir, base+"-comfy.gguf")
		in := "--diffusion-model"
		if f.full {
			in = "-m"
		}
		if code, _, errOut := runApp(t, "convert", in, src, "--type", "q8_0", "-o", sd); code != 0 {
			t.Fatalf("%s: convert: %s", f.family, errOut)
		}
		if code, _, errOut := runApp(t, append([]string{"quantize", src, "--type", "Q8_0", "-o", comfy}, f.quantize...)...); code != 0 {
			t.Fatalf("%s: quantize: %s", f.family, errOut)
		}
		want := rows[f.family]
		got := want
		if got == nil {
			got = []string{"untested", "untested", "untested", "untested"}
		}
		got = slices.Clone(got)
		if py != "" {
			torch := openModel(t, src)
			got[0] = comfyLoads(t, py, sd, torch)
			got[2] = comfyLoads(t, py, comfy, torch)
		}
		if sdcli != "" {
			torch := openModel(t, src)
			got[1] = sdcppLoads(t, sdcli, sd, in, torch)
			got[3] = sdcppLoads(t, sdcli, comfy, in, torch)
		}
		if !slices.Equal(got, want) {
			if os.Getenv("SDTOOL_UPDATE_LOADTABLE") == "1" {
				rows[f.family] = got
				continue
			}
			t.Errorf("%s: the runtimes say %q, docs/load-table.md says %q (SDTOOL_UPDATE_LOADTABLE=1 rewrites it)", f.family, got, want)
		}
	}
	if os.Getenv("SDTOOL_UPDATE_LOADTABLE") == "1" {
		if err := os.WriteFile(loadTableDoc, []byte(writeLoadTable(string(doc), rows)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// comfyLoads runs the ComfyUI-GGUF view of path and says whether the loader
// accepts it and gives every tensor of the source its torch shape.
func comfyLoads(t *testing.T, py, path string, torch formats.Model) string {
	t.Helper()
	python := os.Getenv("SDTOOL_PYTHON")
	if python == "" {
		python = "python3"
	}
	cmd := exec.Command(python, "testdata/comfy_gguf_view.py", path)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+py+string(os.PathListSeparator)+os.Getenv("PYTHONPATH"))
	out, err := cmd.Output()
	if err != nil {
		return "refused: gguf-py cannot read it"
	}
	var view struct {
		Arch    *string `json:"arch"`
		Tensors [][3]json.RawMessage
	}
	if err := json.Unmarshal(out, &view); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	want := map[string][]int64{}
	for _, tt := range torch.Tensors() {
		want[strings.TrimPrefix(tt.Name, "model.diffusion_model.")] = tt.Shape
	}
	var bad []string
	for _, row := range view.Tensors {
		var name, typ string
		var shape []int64
		json.Unmarshal(row[0], &name)
		json.Unmarshal(row[1], &shape)
		json.Unmarshal(row[2], &typ)
		if !slices.Contains(comfyDequant, typ) {
			return "refused: type " + typ
		}
		if w, ok := want[name]; ok && !slices.Equal(w, shape) {
			bad = append(bad, fmt.Sprintf("%s %v for %v", name, shape, w))
		}
	}
	prefix := ""
	switch {
	case view.Arch == nil || *view.Arch == "pig":
		prefix = "compat mode (no general.architecture): "
	case !slices.Contains(comfyArchs, *view.Arch):
		return "refused: architecture " + *view.Arch
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return prefix + fmt.Sprintf("shape mismatch: %s (%s)", pipeline.Count(len(bad), "tensor", "tensors"), bad[0])
	}
	return prefix + "loads"
}

// sdcppLoads runs sd-cli -M convert on path (read as flag gives it) and
// says whether sd.cpp's reader took every tensor, and whether the stored
// dims are the torch shape as sd.cpp compares them with its model's (ne
// padded with ones, so leading dims of 1 do not count; a 5-D weight, which
// sd.cpp folds itself, by its element count).
func sdcppLoads(t *testing.T, bin, path, flag string, torch formats.Model) string {
	t.Helper()
	out := path + ".sdcli.gguf"
	os.Remove(out)
	cmd := exec.Command(bin, "-M", "convert", flag, path, "-o", out)
	msg, err := cmd.CombinedOutput()
	m := openModel(t, path)
	read := "reads it"
	if err != nil {
		// sd-cli's convert collects the tensors of sd.cpp's unused list
		// (CLIP's position_ids) and then fails to load them; loading a
		// model skips them.
		miss := notFound.FindSubmatch(msg)
		if miss == nil || !strings.HasSuffix(string(miss[1]), "position_ids") {
			return "refused: " + strings.ReplaceAll(lastError(msg), filepath.Dir(path)+"/", "")
		}
		read = fmt.Sprintf("reads it (its convert stops at %s, which sd.cpp's loader skips)", miss[1])
	} else if n, want := len(openModel(t, out).Tensors()), len(m.Tensors()); n != want {
		return fmt.Sprintf("reads %d of %d tensors", n, want)
	}
	want := map[string]formats.Tensor{}
	for _, tt := range torch.Tensors() {
		want[strings.TrimPrefix(tt.Name, "model.diffusion_model.")] = tt
	}
	var bad []string
	for _, tt := range m.Tensors() {
		w, ok := want[strings.TrimPrefix(tt.Name, "model.diffusion_model.")]
		switch {
		case !ok:
		case len(w.Shape) > 4:
			if w.Elements() != tt.Elements() {
				bad = append(bad, fmt.Sprintf("%s %v for %v", tt.Name, tt.Shape, w.Shape))
			}
		case !slices.Equal(dropLeadingOnes(tt.Shape), dropLeadingOnes(w.Shape)):
			bad = append(bad, fmt.Sprintf("%s %v for %v", tt.Name, tt.Shape, w.Shape))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Sprintf("%s; shape mismatch: %s (%s)", read, pipeline.Count(len(bad), "tensor", "tensors"), bad[0])
	}
	return read + ", shapes match"
}

// notFound finds the tensor sd-cli says it could not load.
var notFound = regexp.MustCompile(`load tensor failed: tensor '([^']+)' not found`)

// lastError returns sd-cli's last [ERROR] line without its source location.
func lastError(msg []byte) string {
	last := ""
	for _, line := range strings.Split(string(msg), "\n") {
		if i := strings.Index(line, "[ERROR]"); i >= 0 {
			last = line[i:]
		}
	}
	if i := strings.Index(last, " - "); i >= 0 {
		last = last[i+3:]
	}
	return strings.TrimSpace(last)
}

// dropLeadingOnes returns shape without its leading dims of 1 (the
// trailing ones of ggml's ne).
func dropLeadingOnes(shape []int64) []int64 {
	for len(shape) > 1 && shape[0] == 1 {
		shape = shape[1:]
	}
	return shape
}

// parseLoadTable reads the rows of the table in docs/load-table.md: family
// -> four cells.
func parseLoadTable(doc string) map[string][]string {
	rows := map[string][]string{}
	for _, line := range strings.Split(doc, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) != 5 {
			continue
		}
		rows[strings.Trim(cells[0], "`")] = cells[1:]
	}
	return rows
}

// writeLoadTable replaces the table in doc with rows, in loadFamilies order.
func writeLoadTable(doc string, rows map[string][]string) string {
	var out []string
	done := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "| `") {
			if !done {
				for _, f := range loadFamilies {
					out = append(out, "| `"+f.family+"` | "+strings.Join(rows[f.family], " | ")+" |")
				}
				done = true
			}
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

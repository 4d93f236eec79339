package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// Quantize, export to safetensors (quantized tensors decoded to f32), and
// quantize the export again: the types whose quantizer is a function of
// the values alone (q8_0, q4_0, q5_0, q4_1) give back the same file byte for
// byte; in a k-quant mix every float tensor and every such type's tensor
// keeps its bytes, and the k-quants (whose searches see the decoded values
// differently) are counted. Reshaped convs get their shape back.
func TestExportRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, typ := range []string{"Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q4_K_M"} {
		q, e, q2 := filepath.Join(dir, typ+".gguf"), filepath.Join(dir, typ+".safetensors"), filepath.Join(dir, typ+"-again.gguf")
		for _, args := range [][]string{
			{"quantize", tiny, "--type", typ, "--reshape-conv", "-o", q},
			{"export", q, "--dtype", "f32", "-o", e},
			{"quantize", e, "--type", typ, "--reshape-conv", "-o", q2},
		} {
			if code, _, errOut := runApp(t, args...); code != 0 {
				t.Fatalf("%s: %s", strings.Join(args, " "), errOut)
			}
		}
		sameTensorShapes(t, openModel(t, tiny), openModel(t, e))
		a, b := openModel(t, q), openModel(t, q2)
		ta, tb := a.Tensors(), b.Tensors()
		if len(ta) != len(tb) {
			t.Fatalf("%s: %d tensors, then %d", typ, len(ta), len(tb))
		}
		changed := map[string]int{}
		for i := range ta {
			x, _ := formats.ReadTensor(a, &ta[i])
			y, _ := formats.ReadTensor(b, &tb[i])
			if ta[i].Name != tb[i].Name || ta[i].Type != tb[i].Type || !bytes.Equal(x, y) {
				changed[ta[i].Type.String()]++
			}
		}
		for ty, n := range changed {
			switch ty {
			case "q4_K", "q5_K", "q6_K", "q3_K", "q2_K":
				t.Logf("%s: %d %s tensors requantized to other bytes", typ, n, ty)
			default:
				t.Errorf("%s: %d %s tensors changed through the export", typ, n, ty)
			}
		}
		if typ != "Q4_K_M" {
			sameBytes(t, typ+" quantized again", q, q2)
		}
	}
}

// sameTensorShapes checks that b has a's tensor names and shapes in order,
// but for CLIP's integer position_ids, which GGUF outputs leave out as
// sd-cli's convert does.
func sameTensorShapes(t *testing.T, a, b formats.Model) {
	t.Helper()
	ta, tb := a.Tensors(), b.Tensors()
	ta = slices.DeleteFunc(slices.Clone(ta), func(x formats.Tensor) bool { return strings.HasSuffix(x.Name, "embeddings.position_ids") })
	if len(ta) != len(tb) {
		t.Fatalf("%s: %d tensors, want %d", b.Path(), len(tb), len(ta))
	}
	for i := range ta {
		if ta[i].Name != tb[i].Name || !slices.Equal(ta[i].Shape, tb[i].Shape) {
			t.Fatalf("%s: tensor %q %v, want %q %v", b.Path(), tb[i].Name, tb[i].Shape, ta[i].Name, ta[i].Shape)
		}
	}
}

// The naming schemes: comfyui strips a diffusion model's prefix only when
// it is alone, ldm restores it on a bare one, sdcpp is sd.cpp's converter,
// diffusers maps a UNet alone and refuses a full checkpoint.
func TestExportNames(t *testing.T) {
	dir := t.TempDir()
	unet := filepath.Join(dir, "unet.gguf")
	// merge's recipe mode grafts the UNet alone without its prefix.
	recipe := filepath.Join(dir, "r.json")
	src, err := filepath.Abs("../../testdata/tiny-sd1.gguf")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"sources":[{"path":"` + src + `","include":["^model\\.diffusion_model\\."],"strip_prefix":"model.diffusion_model."}]}`
	if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runApp(t, "merge", "--recipe", recipe, "-o", unet); code != 0 {
		t.Fatal(errOut)
	}
	names := func(args ...string) []string {
		t.Helper()
		out := filepath.Join(dir, "x.safetensors")
		if code, _, errOut := runApp(t, append([]string{"export", "-o", out, "--force"}, args...)...); code != 0 {
			t.Fatalf("%q: %s", args, errOut)
		}
		var n []string
		for _, tt := range openModel(t, out).Tensors() {
			n = append(n, tt.Name)
		}
		return n
	}
	full := "../../testdata/tiny-sd1.gguf"
	has := func(list []string, name string) bool { return slices.Contains(list, name) }
	if n := names(full, "--names", "comfyui"); !has(n, "model.diffusion_model.input_blocks.1.1.proj_in.weight") {
		t.Errorf("comfyui on a full checkpoint changed its names: %q...", n[:3])
	}
	if n := names(unet, "--names", "ldm"); !has(n, "model.diffusion_model.input_blocks.1.1.proj_in.weight") {
		t.Errorf("ldm on a bare UNet: %q...", n[:3])
	}
	if n := names(unet, "--names", "comfyui"); !has(n, "input_blocks.1.1.proj_in.weight") {
		t.Errorf("comfyui on a bare UNet: %q...", n[:3])
	}
	if n := names(unet, "--names", "diffusers"); !has(n, "down_blocks.0.attentions.0.proj_in.weight") {
		t.Errorf("diffusers: %q...", n[:3])
	}
	if n := names("../../testdata/tiny-sdxl.gguf", "--names", "sdcpp"); !slices.ContainsFunc(n, func(s string) bool { return strings.HasPrefix(s, "cond_stage_model.1.transformer.text_model.") }) {
		t.Errorf("sdcpp on SDXL: %q...", n[:3])
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{full, "--names", "diffusers"}, "only the UNet"},
		{[]string{full, "--names", "a1111"}, `--names "a1111"`},
		{[]string{full, "--dtype", "q8_0"}, "f16, bf16 or f32"},
		{[]string{full, "-o", filepath.Join(dir, "x.gguf")}, "export writes .safetensors"},
	} {
		args := append([]string{"export", "-o", filepath.Join(dir, "y.safetensors")}, c.args...)
		if code, _, errOut := runApp(t, args...); code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q", c.args, code, errOut)
		}
	}
}

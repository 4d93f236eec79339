package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/internal/synth"
)

// copyFile copies src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMetaMatchesGGUFPy compares meta with llama.cpp's gguf_new_metadata.py
// and gguf_set_metadata.py where they overlap. SDTOOL_GGUF_PY is the
// gguf-py folder of a llama.cpp checkout (holding gguf/, the scripts in
// gguf/scripts/ or, in older ones, scripts/);
// SDTOOL_PYTHON the Python with numpy and tqdm (default python3; Debian's
// python3-numpy and python3-tqdm do). Extra modules gguf-py imports can be
// put on PYTHONPATH, which the test keeps.
func TestMetaMatchesGGUFPy(t *testing.T) {
	dir := os.Getenv("SDTOOL_GGUF_PY")
	if dir == "" {
		t.Skip("SDTOOL_GGUF_PY (llama.cpp's gguf-py folder) is not set")
	}
	python := os.Getenv("SDTOOL_PYTHON")
	if python == "" {
		python = "python3"
	}
	scripts := filepath.Join(dir, "gguf", "scripts") // newer gguf-py; older ones have scripts/ beside gguf/
	if _, err := os.Stat(scripts); err != nil {
		scripts = filepath.Join(dir, "scripts")
	}
	py := func(script string, args ...string) {
		t.Helper()
		cmd := exec.Command(python, append([]string{filepath.Join(scripts, script)}, args...)...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir+string(os.PathListSeparator)+os.Getenv("PYTHONPATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %q: %v\n%s", script, args, err, out)
		}
	}
	tmp := t.TempDir()
	q := filepath.Join(tmp, "q.gguf")
	if code, _, errOut := runApp(t, "quantize", tiny, "--type", "Q4_K_M", "--reshape-conv", "-o", q); code != 0 {
		t.Fatal(errOut)
	}
	for _, in := range append(slices.Clone(splitInputs), q) {
		name := filepath.Base(in)
		for i, c := range []struct{ py, ours []string }{
			{[]string{"--general-name", "renamed", "--remove-metadata", "general.architecture"}, []string{"--set", "general.name=renamed"}},
			{[]string{"--general-description", "a model"}, []string{"--set", "general.description=a model"}},
			{[]string{"--pre-tokenizer", "gpt2", "--remove-metadata", "general.quantization_version"}, []string{"--set", "tokenizer.ggml.pre=gpt2", "--delete", "general.quantization_version"}},
		} {
			if name != "q.gguf" && slices.Contains(c.ours, "general.quantization_version") {
				continue // only the quantized file has the key
			}
			want, got := filepath.Join(tmp, "py.gguf"), filepath.Join(tmp, "go.gguf")
			os.Remove(want)
			py("gguf_new_metadata.py", append([]string{in, want, "--force"}, c.py...)...)
			if code, _, errOut := runApp(t, append([]string{"meta", in, "-o", got, "--force"}, c.ours...)...); code != 0 {
				t.Fatalf("%s case %d: %s", name, i, errOut)
			}
			sameBytes(t, name+" "+strings.Join(c.ours, " "), want, got)
		}
		// gguf_set_metadata.py changes a number where it stands.
		want, got := filepath.Join(tmp, "set-py.gguf"), filepath.Join(tmp, "set-go.gguf")
		copyFile(t, in, want)
		copyFile(t, in, got)
		key := "general.quantization_version"
		if name != "q.gguf" {
			key = "sdtool.generate.steps"
			if _, ok := openModel(t, in).Metadata().Get(key); !ok {
				continue
			}
		}
		py("gguf_set_metadata.py", want, key, "3", "--force")
		if code, _, errOut := runApp(t, "meta", got, "--set", key+"=3", "--in-place"); code != 0 {
			t.Fatalf("%s: %s", name, errOut)
		}
		sameBytes(t, name+" in place", want, got)
	}
}

func sameBytes(t *testing.T, what, want, got string) {
	t.Helper()
	a, err1 := os.ReadFile(want)
	b, err2 := os.ReadFile(got)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s: %d bytes differ from gguf-py's %d", what, len(b), len(a))
	}
}

// Edits land where they should, the tensors keep their bytes, a rename
// carries the orig_shape key, and an edit that changes nothing writes the
// input's bytes.
func TestMetaEdits(t *testing.T) {
	tmp := t.TempDir()
	q := filepath.Join(tmp, "q.gguf")
	if code, _, errOut := runApp(t, "quantize", tiny, "--type", "Q4_K_M", "--reshape-conv", "-o", q); code != 0 {
		t.Fatal(errOut)
	}
	src := openModel(t, q)
	var shaped string
	for _, kv := range src.Metadata() {
		if n, ok := strings.CutPrefix(kv.Key, gguf.OrigShapePrefix); ok {
			shaped = n
			break
		}
	}
	if shaped == "" {
		t.Fatal("no orig_shape key in the reshaped file")
	}
	out := filepath.Join(tmp, "e.gguf")
	code, _, errOut := runApp(t, "meta", q, "--architecture", "wan", "--set", "general.file_type=15", "--set", "x.count=7", "--type", "u16",
		"--delete", "general.quantization_version", "--rename-tensor", shaped+"=renamed.weight", "-o", out)
	if code != 0 {
		t.Fatal(errOut)
	}
	m := openModel(t, out)
	md := m.Metadata()
	if a, _ := md.String("general.architecture"); a != "wan" || md[0].Key != "general.architecture" {
		t.Errorf("architecture %q at %q", a, md[0].Key)
	}
	if kv, _ := md.Get("general.file_type"); kv.Type != formats.TypeUint16 || kv.Value != uint16(15) {
		t.Errorf("file_type %s %v (--type u16 applies to every --set)", kv.Type, kv.Value)
	}
	if kv, _ := md.Get("x.count"); kv.Value != uint16(7) || md[len(md)-1].Key != "x.count" {
		t.Errorf("x.count %v, last key %q", kv.Value, md[len(md)-1].Key)
	}
	if _, ok := md.Get("general.quantization_version"); ok {
		t.Error("general.quantization_version not deleted")
	}
	if _, ok := md.Get(gguf.OrigShapePrefix + "renamed.weight"); !ok {
		t.Error("the orig_shape key did not follow the rename")
	}
	if len(md) != len(src.Metadata())+1-1 {
		t.Errorf("%d keys, want %d", len(md), len(src.Metadata()))
	}
	a, b := src.Tensors(), m.Tensors()
	for i := range a {
		name := a[i].Name
		if name == shaped {
			name = "renamed.weight"
		}
		x, _ := formats.ReadTensor(src, &a[i])
		y, _ := formats.ReadTensor(m, &b[i])
		if b[i].Name != name || !slices.Equal(a[i].Shape, b[i].Shape) || !bytes.Equal(x, y) {
			t.Fatalf("tensor %d: %q %v, want %q %v with the same bytes", i, b[i].Name, b[i].Shape, name, a[i].Shape)
		}
	}
}

// Safetensors metadata stays strings, in place edits equal -o edits, and
// bad edits are refused before anything is written.
func TestMetaSafetensorsAndRefusals(t *testing.T) {
	tmp := t.TempDir()
	st := filepath.Join(tmp, "a.safetensors")
	copyFile(t, tiny, st)
	out := filepath.Join(tmp, "b.safetensors")
	if code, _, errOut := runApp(t, "meta", st, "--set", "general.name=x", "-o", out); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := runApp(t, "meta", st, "--set", "general.name=x", "--in-place"); code != 0 {
		t.Fatal(errOut)
	}
	sameBytes(t, "in place", out, st)
	if n, _ := openModel(t, st).Metadata().String("general.name"); n != "x" {
		t.Errorf("general.name %q", n)
	}
	g := filepath.Join(tmp, "g.gguf")
	copyFile(t, splitInputs[0], g)
	before, _ := os.ReadFile(g)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{st, "--set", "n=1", "--type", "u32", "-o", filepath.Join(tmp, "c.safetensors")}, "holds strings only"},
		{[]string{g, "--delete", "no.such.key", "--in-place"}, `no metadata key "no.such.key"`},
		{[]string{g, "--set", "sdtool.unet.num_heads=many", "--in-place"}, `"many" is not a u32`},
		{[]string{g, "--rename-tensor", "nope=x", "--in-place"}, `tensor "nope": no such tensor`},
		{[]string{g, "--set", "k=v"}, "name the edited file with -o"},
		{[]string{g, "--type", "u128", "--set", "k=1", "--in-place"}, `type "u128"`},
		{[]string{g, "-o", filepath.Join(tmp, "x.gguf")}, "-o and --in-place write an edit"},
	} {
		code, _, errOut := runApp(t, append([]string{"meta"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q", c.args, code, errOut)
		}
	}
	if after, _ := os.ReadFile(g); !bytes.Equal(before, after) {
		t.Error("a refused in-place edit changed the file")
	}
	if code, out, _ := runApp(t, "meta", g); code != 0 || !regexp.MustCompile(`(?m)^sdtool\.unet\.num_heads +u32 +8$`).MatchString(out) {
		t.Errorf("listing: exit %d, %q", code, out)
	}
}

// --shape stores the dims sd-cli dropped (Z-Image's pad tokens), so that
// readers taking the stored dims for the torch shape get [1, C]; the bytes
// stay, and a shape of another element count is refused.
func TestMetaShape(t *testing.T) {
	dir := t.TempDir()
	src, sd, fixed := filepath.Join(dir, "z.safetensors"), filepath.Join(dir, "z.gguf"), filepath.Join(dir, "fixed.gguf")
	if err := synth.Write(src, synth.Spec{Arch: "layout-z-image", Seed: 1, DType: formats.F16}); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runApp(t, "convert", "--diffusion-model", src, "--type", "q8_0", "-o", sd); code != 0 || !strings.Contains(errOut, "x_pad_token") {
		t.Fatalf("convert: exit %d, %s (the summary names the tensors stored without their leading 1)", code, errOut)
	}
	const x, c = "model.diffusion_model.x_pad_token", "model.diffusion_model.cap_pad_token"
	if code, _, errOut := runApp(t, "meta", sd, "--shape", x+"=1,64", "--shape", c+"=1,64", "-o", fixed); code != 0 {
		t.Fatal(errOut)
	}
	a, b := openModel(t, sd), openModel(t, fixed)
	for i, tt := range b.Tensors() {
		want := a.Tensors()[i].Shape
		if tt.Name == x || tt.Name == c {
			want = []int64{1, 64}
		}
		x1, _ := formats.ReadTensor(a, &a.Tensors()[i])
		y1, _ := formats.ReadTensor(b, &tt)
		if !slices.Equal(tt.Shape, want) || !bytes.Equal(x1, y1) {
			t.Errorf("tensor %q: %v, want %v with the same bytes", tt.Name, tt.Shape, want)
		}
	}
	for _, bad := range []string{x + "=2,64", "nope=1", x + "=1,x"} {
		if code, _, errOut := runApp(t, "meta", sd, "--shape", bad, "-o", filepath.Join(dir, "bad.gguf")); code != 1 {
			t.Errorf("--shape %s: exit %d, %s", bad, code, errOut)
		}
	}
}

// An edit of a split GGUF is one file without the split keys.
func TestMetaOfSplit(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runApp(t, "split", splitInputs[0], "--split-max-size", "1M", "--keep-dims", "-o", filepath.Join(dir, "s")); code != 0 {
		t.Fatal(errOut)
	}
	out := filepath.Join(dir, "one.gguf")
	if code, _, errOut := runApp(t, "meta", filepath.Join(dir, "s-00002-of-00004.gguf"), "--set", "general.name=joined", "-o", out); code != 0 {
		t.Fatal(errOut)
	}
	m := openModel(t, out)
	if _, ok := m.Metadata().Get(gguf.SplitCountKey); ok {
		t.Error("split.count kept in a single file")
	}
	sameTensors(t, openModel(t, splitInputs[0]), m)
}

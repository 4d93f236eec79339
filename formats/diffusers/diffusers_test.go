package diffusers

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/safetensors"
)

// writeST writes a safetensors file whose tensor i holds bytes seed+i+j.
func writeST(t *testing.T, path string, tensors []formats.Tensor, seed byte) map[string][]byte {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, tensors, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for i, tn := range w.Layout() {
		b := make([]byte, tn.Size)
		for j := range b {
			b[j] = seed + byte(i*7+j)
		}
		data[tn.Name] = b
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}
	return data
}

func f32(name string, shape ...int64) formats.Tensor {
	return formats.Tensor{Name: name, Type: formats.F32, Shape: shape}
}

// sdxlFolder builds a small SDXL-like folder with all four components.
func sdxlFolder(t *testing.T) (string, map[string][]byte) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"_class_name": "StableDiffusionXLPipeline", "_diffusers_version": "0.30.0", "unet": ["diffusers", "UNet2DConditionModel"]}`), 0o444)
	want := map[string][]byte{}
	add := func(prefix string, d map[string][]byte) {
		for k, v := range d {
			want[prefix+k] = v
		}
	}
	add("unet.", writeST(t, filepath.Join(dir, "unet", "diffusion_pytorch_model.safetensors"),
		[]formats.Tensor{f32("conv_in.weight", 4, 4), f32("conv_in.bias", 4)}, 1))
	add("vae.", writeST(t, filepath.Join(dir, "vae", "diffusion_pytorch_model.safetensors"),
		[]formats.Tensor{f32("decoder.conv_out.weight", 3, 2)}, 50))
	add("te.", writeST(t, filepath.Join(dir, "text_encoder", "model.safetensors"),
		[]formats.Tensor{f32("text_model.final_layer_norm.weight", 8)}, 100))
	add("te.1.", writeST(t, filepath.Join(dir, "text_encoder_2", "model.safetensors"),
		[]formats.Tensor{f32("text_model.final_layer_norm.weight", 6), f32("text_projection.weight", 2, 6)}, 150))
	os.MkdirAll(filepath.Join(dir, "scheduler"), 0o755)
	os.MkdirAll(filepath.Join(dir, "tokenizer"), 0o755)
	return dir, want
}

func names(m formats.Model) []string {
	var out []string
	for _, t := range m.Tensors() {
		out = append(out, t.Name)
	}
	return out
}

func checkData(t *testing.T, m formats.Model, want map[string][]byte) {
	t.Helper()
	if len(m.Tensors()) != len(want) {
		t.Fatalf("%d tensors, want %d: %q", len(m.Tensors()), len(want), names(m))
	}
	for _, tn := range m.Tensors() {
		got, err := formats.ReadTensor(m, &tn)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[tn.Name]) {
			t.Errorf("%s: data %x, want %x", tn.Name, got, want[tn.Name])
		}
	}
}

func TestSDXL(t *testing.T) {
	dir, want := sdxlFolder(t)
	m, err := formats.Open(dir) // through detection: head is nil for a directory
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, ok := m.(*Model); !ok {
		t.Fatalf("opened as %T", m)
	}
	wantNames := []string{
		"unet.conv_in.weight", "unet.conv_in.bias",
		"vae.decoder.conv_out.weight",
		"te.text_model.final_layer_norm.weight",
		"te.1.text_model.final_layer_norm.weight", "te.1.text_projection.weight",
	}
	if got := names(m); !slices.Equal(got, wantNames) {
		t.Fatalf("names %q, want %q", got, wantNames)
	}
	checkData(t, m, want)
	info := m.Info()
	if info.Format != "diffusers" || len(info.Files) != 4 || len(info.Warnings) != 0 {
		t.Errorf("info %+v", info)
	}
	if c, _ := m.Metadata().String("diffusers.class_name"); c != "StableDiffusionXLPipeline" {
		t.Errorf("class name %q", c)
	}
	// Shapes and files are the components' own; only names change.
	if tn, _ := formats.Find(m, "te.1.text_projection.weight"); !slices.Equal(tn.Shape, []int64{2, 6}) || filepath.Base(tn.File) != "model.safetensors" {
		t.Errorf("descriptor %+v", tn)
	}
}

// TestUNetOnly: a folder without model_index.json is recognised by its
// UNet; missing optional components are skipped; a name that already has
// the prefix keeps it.
func TestUNetOnly(t *testing.T) {
	dir := t.TempDir()
	want := map[string][]byte{}
	for k, v := range writeST(t, filepath.Join(dir, "unet", "diffusion_pytorch_model.safetensors"), []formats.Tensor{f32("unet.already", 2), f32("x", 2)}, 9) {
		if !strings.HasPrefix(k, "unet.") {
			k = "unet." + k
		}
		want[k] = v
	}
	if !IsFolder(dir) {
		t.Fatal("not detected")
	}
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := names(m); !slices.Equal(got, []string{"unet.already", "unet.x"}) {
		t.Fatalf("names %q", got)
	}
	checkData(t, m, want)
}

// TestSharded: a component stored as shards with an index.json.
func TestSharded(t *testing.T) {
	dir := t.TempDir()
	unet := filepath.Join(dir, "unet")
	want := map[string][]byte{}
	for k, v := range writeST(t, filepath.Join(unet, "diffusion_pytorch_model-00001-of-00002.safetensors"), []formats.Tensor{f32("a", 2)}, 1) {
		want["unet."+k] = v
	}
	for k, v := range writeST(t, filepath.Join(unet, "diffusion_pytorch_model-00002-of-00002.safetensors"), []formats.Tensor{f32("b", 3)}, 2) {
		want["unet."+k] = v
	}
	os.WriteFile(filepath.Join(unet, "diffusion_pytorch_model.safetensors.index.json"), []byte(`{"metadata": {}, "weight_map": {
		"a": "diffusion_pytorch_model-00001-of-00002.safetensors",
		"b": "diffusion_pytorch_model-00002-of-00002.safetensors"}}`), 0o444)
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"_class_name": "StableDiffusionPipeline"}`), 0o444)
	m, err := formats.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	checkData(t, m, want)
	if got := m.Info().Files; len(got) != 2 {
		t.Errorf("files %q", got)
	}
}

func TestErrors(t *testing.T) {
	// model_index.json but no UNet (an SD3/Flux layout).
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"_class_name": "FluxPipeline"}`), 0o444)
	writeST(t, filepath.Join(dir, "transformer", "diffusion_pytorch_model.safetensors"), []formats.Tensor{f32("x", 1)}, 0)
	_, err := formats.Open(dir)
	if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), dir+": unet/diffusion_pytorch_model.safetensors is missing") {
		t.Errorf("no unet: %v", err)
	}

	// A broken component names its file.
	dir2, _ := sdxlFolder(t)
	vae := filepath.Join(dir2, "vae", "diffusion_pytorch_model.safetensors")
	os.Chmod(vae, 0o644)
	os.WriteFile(vae, []byte("garbage!garbage!"), 0o644)
	_, err = Open(dir2)
	if err == nil || !strings.Contains(err.Error(), vae) {
		t.Errorf("broken vae: %v", err)
	}

	// A directory that is not a diffusers folder is not matched.
	if IsFolder(t.TempDir()) {
		t.Error("empty directory matched")
	}
	if _, err := formats.Open(t.TempDir()); !errors.Is(err, formats.ErrFormat) {
		t.Errorf("empty directory: %v", err)
	}

	// A bad model_index.json.
	dir3, _ := sdxlFolder(t)
	os.Chmod(filepath.Join(dir3, IndexFile), 0o644)
	os.WriteFile(filepath.Join(dir3, IndexFile), []byte(`{`), 0o644)
	if _, err := Open(dir3); err == nil || !strings.Contains(err.Error(), IndexFile) {
		t.Errorf("bad index: %v", err)
	}
}

// TestReadTensorAt: a descriptor must come from this model.
func TestReadTensorAt(t *testing.T) {
	dir, _ := sdxlFolder(t)
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tn := m.Tensors()[0]
	tn.Name = "nope"
	if _, err := m.ReadTensorAt(&tn, make([]byte, 4), 0); err == nil || !strings.Contains(err.Error(), `tensor "nope" is not in this diffusers folder`) {
		t.Errorf("unknown name: %v", err)
	}
	tn = m.Tensors()[0]
	if _, err := m.ReadTensorAt(&tn, make([]byte, tn.Size+1), 0); err == nil || !strings.Contains(err.Error(), `tensor "unet.conv_in.weight"`) {
		t.Errorf("read past the end: %v", err)
	}
}

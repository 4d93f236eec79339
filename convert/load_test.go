package convert

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sdtool/sdtool/formats"
	_ "github.com/sdtool/sdtool/formats/diffusers"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/pipeline"
)

func writeST(t *testing.T, path string, names ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var ts []formats.Tensor
	for _, n := range names {
		ts = append(ts, formats.Tensor{Name: n, Type: formats.F32, Shape: []int64{2}})
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := safetensors.NewWriter(f, ts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, 8*len(names)))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// A diffusers folder loads as sd.cpp loads it: components in the order
// unet, vae, te, each file's names sorted, sd.cpp's own prefixes, and the
// flag's prefix ignored.
func TestLoadDiffusersOrder(t *testing.T) {
	dir := t.TempDir()
	writeST(t, filepath.Join(dir, "unet", "diffusion_pytorch_model.safetensors"), "up_blocks.0.b", "conv_in.weight", "down_blocks.0.a")
	writeST(t, filepath.Join(dir, "vae", "diffusion_pytorch_model.safetensors"), "encoder.z", "decoder.a")
	writeST(t, filepath.Join(dir, "text_encoder", "model.safetensors"), "text_model.b", "text_model.a")
	m, err := formats.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, flag := range []string{"model", "diffusion-model"} {
		src, _, err := Load(map[string]formats.Model{flag: m})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range src {
			got = append(got, s.Name)
		}
		want := []string{"unet.conv_in.weight", "unet.down_blocks.0.a", "unet.up_blocks.0.b", "vae.decoder.a", "vae.encoder.z", "te.text_model.a", "te.text_model.b"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("--%s: order\n%v\nwant\n%v", flag, got, want)
		}
	}
}

// Safetensors tensors come out in byte-wise name order whatever the file
// order; a later component with the same name replaces the earlier tensor
// in its first position.
func TestLoadOrderAndReplacement(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.safetensors")
	b := filepath.Join(dir, "b.safetensors")
	writeST(t, a, "model.diffusion_model.z", "Z", "model.diffusion_model.a", "betas")
	writeST(t, b, "a", "new")
	ma, _ := formats.Open(a)
	mb, _ := formats.Open(b)
	defer ma.Close()
	defer mb.Close()
	src, skipped, err := Load(map[string]formats.Model{"model": ma, "diffusion-model": mb})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range src {
		got = append(got, s.Name+"@"+filepath.Base(s.Tensor.File))
	}
	want := []string{"Z@a.safetensors", "model.diffusion_model.a@b.safetensors", "model.diffusion_model.z@a.safetensors", "model.diffusion_model.new@b.safetensors"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if len(skipped) != 2 || !skipped[0].Unused || skipped[1].Unused {
		t.Errorf("skipped: %v", skipped)
	}
}

// --convert-name stores sd.cpp's names: diffusers component prefixes become
// the LDM ones (unet. -> model.diffusion_model., vae. -> first_stage_model.,
// te. -> cond_stage_model.transformer.). Three tensors are not enough for
// sd.cpp to detect a version, so, as in sd.cpp, only the prefixes change.
func TestConvertNameDiffusers(t *testing.T) {
	dir := t.TempDir()
	writeST(t, filepath.Join(dir, "unet", "diffusion_pytorch_model.safetensors"), "conv_in.weight")
	writeST(t, filepath.Join(dir, "vae", "diffusion_pytorch_model.safetensors"), "decoder.conv_in.weight")
	writeST(t, filepath.Join(dir, "text_encoder", "model.safetensors"), "text_model.final_layer_norm.weight")
	out := filepath.Join(t.TempDir(), "o.gguf")
	plan, err := run(&Options{Inputs: map[string]string{"model": dir}, Output: out, ConvertName: true}, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range plan.Outputs {
		got = append(got, r.Name)
	}
	want := []string{"model.diffusion_model.conv_in.weight", "first_stage_model.decoder.conv_in.weight",
		"cond_stage_model.transformer.text_model.final_layer_norm.weight"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("converted names %v\nwant %v", got, want)
	}
	m, err := formats.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if ts := m.Tensors(); len(ts) != 3 || ts[0].Name != want[0] {
		t.Errorf("output tensors: %v", ts)
	}
}

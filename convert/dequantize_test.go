package convert

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
)

// Asking for a float type decodes every quantized tensor to it, in GGUF and
// safetensors alike, including the ones sd.cpp's policy never converts (a
// token embedding, as quantize's mixes write it), and the summary says so.
func TestFloatTypeDequantizesEverything(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "q.gguf")
	ts := []formats.Tensor{
		{Name: "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight", Type: formats.Q8_0, Shape: []int64{4, 64}},
		{Name: "model.diffusion_model.input_blocks.1.1.proj_in.weight", Type: formats.Q8_0, Shape: []int64{4, 64}},
	}
	f, err := os.Create(q)
	if err != nil {
		t.Fatal(err)
	}
	w, err := gguf.NewWriter(f, ts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := quant.Encoder(formats.Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]float32, 4*64)
	for i := range rows {
		rows[i] = float32(i%17) / 17
	}
	for range ts {
		rb, _ := formats.Q8_0.RowBytes(64)
		b := make([]byte, 4*rb)
		for r := range 4 {
			enc.Quantize(b[int64(r)*rb:int64(r+1)*rb], rows[64*r:64*(r+1)], nil)
		}
		w.Write(b)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, out := range []string{"back.gguf", "back.safetensors"} {
		path := filepath.Join(dir, out)
		plan, err := run(&Options{Inputs: map[string]string{"model": q}, Output: path, Type: "f16"}, pipeline.Options{})
		if err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		m, err := formats.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, ts := range m.Tensors() {
			if ts.Type != formats.F16 {
				t.Errorf("%s: tensor %s is %s, want f16", out, ts.Name, ts.Type)
			}
		}
		m.Close()
		if notes := strings.Join(plan.Notes, "\n"); !strings.Contains(notes, "dequantized: 2 quantized tensors") || !strings.Contains(notes, "1 of them sd-cli would keep") {
			t.Errorf("%s: the summary does not say what it dequantized: %q", out, plan.Notes)
		}
	}
}

// An output named neither .gguf nor .safetensors is refused before
// anything is written (sd-cli writes a GGUF under any other name).
func TestConvertRefusesOtherExtensions(t *testing.T) {
	dir := t.TempDir()
	for _, out := range []string{"out.bin", "out", "out.ckpt"} {
		_, err := Plan(&Options{Inputs: map[string]string{"model": tinyGGUF}, Output: filepath.Join(dir, out)})
		if err == nil || !strings.Contains(err.Error(), "must end in .gguf or .safetensors") {
			t.Errorf("%s: %v", out, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("wrote %s", entries[0].Name())
	}
}

// A rule that matches no tensor is reported by its text, and an imatrix
// entry for a tensor sd.cpp keeps in float is told apart from one that
// names no tensor of the model.
func TestConvertReportsRulesAndEntriesThatDoNothing(t *testing.T) {
	dir := t.TempDir()
	plan, err := Plan(&Options{Inputs: map[string]string{"model": tinyGGUF}, Output: filepath.Join(dir, "x.gguf"), Type: "q4_0",
		Rules: `zzz=f16,attn2\.to_k=q8_0`, Imatrix: []string{"../testdata/tiny-sd1.imatrix.dat"}})
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	notes := strings.Join(plan.Notes, "\n")
	for _, want := range []string{`--tensor-type-rules rule "zzz=f16" matches no tensor`, "entries are for tensors that stay unquantized", "entries weight the quantization"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	for _, bad := range []string{`attn2\.to_k=q8_0`, "is it for another model"} {
		if strings.Contains(notes, bad) {
			t.Errorf("notes wrongly say %q:\n%s", bad, notes)
		}
	}
}

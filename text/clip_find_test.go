package text

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeCLIPFolder writes vocab.json and merges.txt of a small CLIP tokenizer into dir.
func writeCLIPFolder(t *testing.T, dir string) {
	t.Helper()
	merges := "#version: 0.2\nc a\nca t</w>\n"
	m, _ := ParseMerges("m", merges)
	tok, err := NewCLIPTokenizerFromMerges(m)
	if err != nil {
		t.Fatal(err)
	}
	vocab := map[string]int32{}
	for s, id := range tok.vocab {
		vocab[s] = id
	}
	data, _ := json.Marshal(vocab)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "vocab.json"), data, 0o644)
	os.WriteFile(filepath.Join(dir, "merges.txt"), []byte(merges), 0o644)
}

func touch(t *testing.T, path string) string {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.WriteFile(path, nil, 0o644)
	return path
}

// The tokenizer is found where people keep one, the place is named, and
// when there is none every place searched is listed.
func TestFindCLIPTokenizer(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	env := func(hf string) func(string) string {
		return func(k string) string {
			switch k {
			case "HOME":
				return home
			case "HF_HOME":
				return hf
			}
			return ""
		}
	}
	noHF := env("")

	beside := filepath.Join(root, "beside")
	model := touch(t, filepath.Join(beside, "sd15.safetensors"))
	os.WriteFile(filepath.Join(beside, "merges.txt"), []byte("#version: 0.2\nc a\nca t</w>\n"), 0o644)

	diffusers := filepath.Join(root, "sd15-diffusers")
	unet := touch(t, filepath.Join(diffusers, "unet", "diffusion_pytorch_model.safetensors"))
	writeCLIPFolder(t, filepath.Join(diffusers, "tokenizer"))

	comfy := filepath.Join(root, "ComfyUI")
	ckpt := touch(t, filepath.Join(comfy, "models", "checkpoints", "sd15.safetensors"))
	writeCLIPFolder(t, filepath.Join(comfy, "comfy", "sd1_tokenizer"))

	lone := touch(t, filepath.Join(root, "lone", "models", "sd15.safetensors"))
	hf := filepath.Join(root, "hf")
	writeCLIPFolder(t, filepath.Join(hf, "hub", "models--openai--clip-vit-large-patch14", "snapshots", "0123abc"))

	for _, c := range []struct {
		name, model  string
		getenv       func(string) string
		where, under string
	}{
		{"beside the model file", model, noHF, "beside the model", beside},
		{"a diffusers folder given whole", diffusers, noHF, "the diffusers folder's tokenizer/", filepath.Join(diffusers, "tokenizer")},
		{"a diffusers component file", unet, noHF, "the diffusers folder's tokenizer/", filepath.Join(diffusers, "tokenizer")},
		{"a ComfyUI checkpoint", ckpt, noHF, "the ComfyUI install the model is in", filepath.Join(comfy, "comfy", "sd1_tokenizer")},
		{"the Hugging Face cache", lone, env(hf), "the Hugging Face cache (openai/clip-vit-large-patch14)", filepath.Join(hf, "hub")},
	} {
		tok, p, err := FindCLIPTokenizer(c.model, c.getenv)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if p.Where != c.where || !strings.HasPrefix(p.Path, c.under) {
			t.Errorf("%s: found %s, want %q under %s", c.name, p, c.where, c.under)
		}
		if ids := tok.Encode("cat"); len(ids) != 1 {
			t.Errorf("%s: \"cat\" encodes as %v, want one merged token", c.name, ids)
		}
	}

	_, _, err := FindCLIPTokenizer(lone, noHF)
	if !errors.Is(err, ErrNoCLIPTokenizerFound) {
		t.Fatalf("nothing to find: %v", err)
	}
	for _, want := range []string{filepath.Join(root, "lone", "models", "tokenizer.json"), filepath.Join(home, "ComfyUI", "comfy", "sd1_tokenizer"),
		filepath.Join(home, ".cache", "huggingface", "hub", "models--openai--clip-vit-large-patch14", "snapshots")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not list %s: %v", want, err)
		}
	}
}

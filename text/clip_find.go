package text

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Place is somewhere FindCLIPTokenizer looks for a CLIP tokenizer: a file
// or folder that LoadCLIPTokenizer reads, and what kind of place it is.
type Place struct {
	// Path is the tokenizer.json, merges file or folder to load.
	Path string
	// Where says what the place is ("beside the model", "the Hugging Face cache (openai/clip-vit-large-patch14)").
	Where string
	// probe is the file whose presence says the place is there ("": Path).
	probe string
}

// String returns "PATH (WHERE)".
func (p Place) String() string { return p.Path + " (" + p.Where + ")" }

// probePath returns the file or folder that says the place exists.
func (p Place) probePath() string {
	if p.probe != "" {
		return p.probe
	}
	return p.Path
}

// hubRepos are the Hugging Face repositories whose CLIP tokenizer a hub
// cache may hold, with the folder of the snapshot that has it: the CLIP-L
// and OpenCLIP repositories at their root, the Stable Diffusion pipelines
// in tokenizer/. Every one of them is CLIP's 49,408-token BPE vocabulary.
var hubRepos = []struct{ repo, sub string }{
	{"openai/clip-vit-large-patch14", ""},
	{"stable-diffusion-v1-5/stable-diffusion-v1-5", "tokenizer"},
	{"runwayml/stable-diffusion-v1-5", "tokenizer"},
	{"CompVis/stable-diffusion-v1-4", "tokenizer"},
	{"stabilityai/stable-diffusion-2-1", "tokenizer"},
	{"stabilityai/stable-diffusion-xl-base-1.0", "tokenizer"},
	{"laion/CLIP-ViT-H-14-laion2B-s32B-b79K", ""},
	{"laion/CLIP-ViT-bigG-14-laion2B-39B-b160k", ""},
	{"openai/clip-vit-base-patch32", ""},
}

// comfyTokenizer is where a ComfyUI install keeps the CLIP tokenizer that
// its SD 1.x, SD 2.x and SDXL text encoders share.
var comfyTokenizer = filepath.Join("comfy", "sd1_tokenizer")

// hubCache returns the Hugging Face hub cache folder as huggingface_hub
// finds it: HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub.
func hubCache(getenv func(string) string) string {
	if d := getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".cache", "huggingface", "hub")
	}
	return ""
}

// CLIPTokenizerPlaces lists, in the order FindCLIPTokenizer tries them,
// where people keep a CLIP tokenizer for the model at modelPath: beside the
// model file (tokenizer.json, vocab.json with merges.txt, a tokenizer/
// folder), the tokenizer/ folder of the diffusers folder the model is or
// sits in, the comfy/sd1_tokenizer folder of a ComfyUI install the model
// lives under (or ~/ComfyUI), and the Hugging Face hub cache's snapshots of
// the CLIP and Stable Diffusion repositories. getenv reads the environment
// (os.Getenv; tests pass their own). Places that do not exist are listed
// too, so that an error can say where it looked.
func CLIPTokenizerPlaces(modelPath string, getenv func(string) string) []Place {
	var out []Place
	seen := map[string]bool{}
	add := func(path, where string) {
		if path == "" || seen[path] {
			return
		}
		seen[path] = true
		p := Place{Path: path, Where: where}
		if filepath.Base(path) == "vocab.json" {
			// vocab.json with merges.txt: the folder loads them together.
			p.Path, p.probe = filepath.Dir(path), path
		}
		out = append(out, p)
	}
	abs, err := filepath.Abs(modelPath)
	if err != nil {
		abs = modelPath
	}
	dir := filepath.Dir(abs)
	if st, err := os.Stat(abs); err == nil && st.IsDir() {
		add(filepath.Join(abs, "tokenizer"), "the diffusers folder's tokenizer/")
		dir = abs
	}
	add(filepath.Join(dir, "tokenizer.json"), "beside the model")
	add(filepath.Join(dir, "vocab.json"), "beside the model, with merges.txt")
	add(filepath.Join(dir, "merges.txt"), "beside the model")
	add(filepath.Join(dir, "tokenizer"), "beside the model")
	// A component file of a diffusers folder (unet/diffusion_pytorch_model.safetensors).
	add(filepath.Join(filepath.Dir(dir), "tokenizer"), "the diffusers folder's tokenizer/")
	for d := dir; ; d = filepath.Dir(d) {
		if isDir(filepath.Join(d, "comfy")) {
			add(filepath.Join(d, comfyTokenizer), "the ComfyUI install the model is in")
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if h := getenv("HOME"); h != "" {
		add(filepath.Join(h, "ComfyUI", comfyTokenizer), "a ComfyUI install in the home folder")
	}
	if cache := hubCache(getenv); cache != "" {
		for _, r := range hubRepos {
			repo := filepath.Join(cache, "models--"+strings.ReplaceAll(r.repo, "/", "--"), "snapshots")
			snaps, _ := filepath.Glob(filepath.Join(repo, "*"))
			sort.Sort(sort.Reverse(sort.StringSlice(snaps)))
			where := "the Hugging Face cache (" + r.repo + ")"
			if len(snaps) == 0 {
				add(filepath.Join(repo, "*", r.sub), where)
			}
			for _, s := range snaps {
				add(filepath.Join(s, r.sub), where)
			}
		}
	}
	return out
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// ErrNoCLIPTokenizerFound is wrapped by FindCLIPTokenizer's error when no
// place held a tokenizer.
var ErrNoCLIPTokenizerFound = errors.New("no CLIP tokenizer found")

// FindCLIPTokenizer loads the first CLIP tokenizer found in the places of
// CLIPTokenizerPlaces and says which place it was. A place that exists but
// does not hold a readable tokenizer is skipped (a vocab.json that belongs
// to another tokenizer, a merges.txt alone beside a vocab.json of other
// ids). When none is found the error wraps ErrNoCLIPTokenizerFound and
// lists every place searched.
func FindCLIPTokenizer(modelPath string, getenv func(string) string) (*CLIPTokenizer, Place, error) {
	places := CLIPTokenizerPlaces(modelPath, getenv)
	var tried []string
	for _, p := range places {
		if _, err := os.Stat(p.probePath()); err != nil {
			tried = append(tried, p.probePath())
			continue
		}
		t, err := LoadCLIPTokenizer(p.Path)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", p.probePath(), err))
			continue
		}
		return t, p, nil
	}
	return nil, Place{}, fmt.Errorf("%w; searched %s", ErrNoCLIPTokenizerFound, strings.Join(tried, ", "))
}

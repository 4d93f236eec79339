package family

import (
	"bufio"
	"compress/gzip"
	"os"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// readNames reads a committed tensor-name list (one name a line, gzip).
func readNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRealHeaders detects families on tensor lists that model
// repositories publish. flux1-dev-diffusers-transformer.names.gz holds the
// 1160 names of FLUX.1-dev's diffusers transformer, taken from a published
// transformer/diffusion_pytorch_model.safetensors.index.json (its
// weight_map's keys, sorted). Shapes are not in an index, so only
// name-based rules and keep-lists are checked.
func TestRealHeaders(t *testing.T) {
	names := readNames(t, "../testdata/headers/flux1-dev-diffusers-transformer.names.gz")
	if len(names) != 1160 {
		t.Fatalf("%d names, want 1160", len(names))
	}
	tensors := make([]formats.Tensor, len(names))
	for i, n := range names {
		tensors[i] = formats.Tensor{Name: n, Type: formats.BF16, Shape: []int64{3072, 3072}}
	}
	a := Detect(tensors, nil)
	if a.Name != "flux" || a.Variant() != "diffusers" {
		t.Fatalf("detected %s (%q), want flux (diffusers)", a.Name, a.Variant())
	}
	for _, c := range []struct {
		name string
		keep bool
	}{
		{"x_embedder.weight", true},
		{"context_embedder.weight", true},
		{"time_text_embed.guidance_embedder.linear_1.weight", true},
		{"norm_out.linear.weight", true},
		{"proj_out.weight", true},
		{"single_transformer_blocks.0.proj_out.weight", false},
		{"transformer_blocks.0.attn.to_v.weight", false},
	} {
		if !slices.Contains(names, c.name) {
			t.Errorf("%s is not in the real list", c.name)
			continue
		}
		_, cls := a.Classify(c.name, []int64{3072, 3072})
		if (cls.Keep != "") != c.keep {
			t.Errorf("%s: kept %q, want kept %v", c.name, cls.Keep, c.keep)
		}
	}
}

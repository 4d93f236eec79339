package merge

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseRecipeFields(t *testing.T) {
	r, err := ParseRecipe("r.json", []byte(`{
  "sources": [
    {"path": "a.safetensors", "include": [".*"], "exclude": ["x", "y"]},
    {"path": "b.gguf", "include": ["q"], "prefix": "p.", "strip_prefix": "s.", "rename": [["^a(\\d)", "b$1"], ["z", ""]]}
  ],
  "metadata": {"k": "v"}
}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Sources) != 2 || r.File != "r.json" || !reflect.DeepEqual(r.Metadata, map[string]string{"k": "v"}) {
		t.Fatalf("parsed %+v", r)
	}
	s := r.Sources[1]
	if s.Path != "b.gguf" || s.Prefix != "p." || s.StripPrefix != "s." || len(s.Rename) != 2 ||
		s.Rename[0].Pattern != `^a(\d)` || s.Rename[0].Replace != "b$1" {
		t.Errorf("source 1 = %+v", s)
	}
	if !reflect.DeepEqual(r.Sources[0].Exclude, []string{"x", "y"}) {
		t.Errorf("exclude = %q", r.Sources[0].Exclude)
	}
}

// Every malformed recipe is refused with the file and the field named.
func TestParseRecipeErrors(t *testing.T) {
	cases := []struct{ js, want string }{
		{`[]`, "recipe: want an object, got an array"},
		{`{"sources": [{"path": "a", "include": ["x"]}], "extra": 1}`, "extra: unknown field"},
		{`{"sources": [{"path": "a", "include": ["x"], "prefixx": "p"}]}`, "sources[0].prefixx: unknown field"},
		{`{"metadata": {}}`, "sources: required field is missing"},
		{`{"sources": []}`, "sources: no sources"},
		{`{"sources": {}}`, "sources: want an array of sources, got an object"},
		{`{"sources": [{"include": ["x"]}]}`, "sources[0].path: required field is missing"},
		{`{"sources": [{"path": "", "include": ["x"]}]}`, "sources[0].path: empty path"},
		{`{"sources": [{"path": 3, "include": ["x"]}]}`, "sources[0].path: want a string, got a number"},
		{`{"sources": [{"path": "a"}]}`, "sources[0].include: required field is missing"},
		{`{"sources": [{"path": "a", "include": []}]}`, "sources[0].include: empty"},
		{`{"sources": [{"path": "a", "include": "x"}]}`, "sources[0].include: want an array of strings, got a string"},
		{`{"sources": [{"path": "a", "include": ["x", 1]}]}`, "sources[0].include[1]: want a string, got a number"},
		{`{"sources": [{"path": "a", "include": ["("]}]}`, "sources[0].include[0]: pattern \"(\""},
		{`{"sources": [{"path": "a", "include": ["x"], "exclude": [true]}]}`, "sources[0].exclude[0]: want a string, got a boolean"},
		{`{"sources": [{"path": "a", "include": ["x"], "exclude": ["[z"]}]}`, "sources[0].exclude[0]: pattern"},
		{`{"sources": [{"path": "a", "include": ["x"], "prefix": null}]}`, "sources[0].prefix: want a string, got null"},
		{`{"sources": [{"path": "a", "include": ["x"], "strip_prefix": 1}]}`, "sources[0].strip_prefix: want a string"},
		{`{"sources": [{"path": "a", "include": ["x"], "rename": {"a": "b"}}]}`, "sources[0].rename: want an array of [pattern, replacement] pairs"},
		{`{"sources": [{"path": "a", "include": ["x"], "rename": [["a"]]}]}`, "sources[0].rename[0]: want a [pattern, replacement] pair of strings, got an array of 1 values"},
		{`{"sources": [{"path": "a", "include": ["x"], "rename": [["a", 2]]}]}`, "sources[0].rename[0][1]: want a string"},
		{`{"sources": [{"path": "a", "include": ["x"], "rename": [["(", "b"]]}]}`, "sources[0].rename[0][0]: pattern"},
		{`{"sources": [{"path": "a", "include": ["x"]}], "metadata": {"k": 1}}`, "metadata.k: want a string, got a number"},
		{`{"sources": [{"path": "a", "include": ["x"]}], "metadata": []}`, "metadata: want an object of strings"},
		{`{"sources": [{"path": "a", "path": "b", "include": ["x"]}]}`, "sources[0].path: key appears twice"},
		{`{"sources": [{"path": "a", "include": ["x"]}]} {}`, "data after the recipe object"},
		{`{"sources": [{"path": "a", "include": ["x"]}]`, "invalid JSON"},
		{``, "invalid JSON"},
		{`{"sources": [{"path": "a", "include": ["x"],}]}`, "invalid JSON"},
		{`{"sources": [7]}`, "sources[0]: want an object, got a number"},
	}
	for _, c := range cases {
		_, err := ParseRecipe("bad.json", []byte(c.js))
		if err == nil {
			t.Errorf("%s: accepted", c.js)
			continue
		}
		wantErr(t, err, "bad.json: ", c.want)
	}
	// Every problem is reported, not only the first.
	_, err := ParseRecipe("bad.json", []byte(`{"sources": [{"path": 1, "include": []}, {"path": "b", "include": ["x"], "q": 1}]}`))
	wantErr(t, err, "sources[0].path", "sources[0].include", "sources[1].q")
}

func TestSelectsAndOutputName(t *testing.T) {
	r, err := ParseRecipe("r.json", []byte(`{"sources": [
		{"path": "a", "include": ["attn", "^norm$"], "exclude": ["attn2", "bias$"],
		 "strip_prefix": "model.", "rename": [["^blocks\\.(\\d+)\\.", "b$1."], ["b1\\.", "first."]], "prefix": "unet."}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := &r.Sources[0]
	sel := map[string]bool{
		"model.blocks.1.attn1.weight": true,  // unanchored: attn anywhere
		"model.blocks.1.attn2.weight": false, // exclude wins
		"model.blocks.1.attn1.bias":   false, // exclude anchored at the end
		"norm":                        true,
		"x.norm":                      false, // ^norm$ is anchored
		"mlp.weight":                  false, // no include matches
	}
	for name, want := range sel {
		if got := s.Selects(name); got != want {
			t.Errorf("Selects(%q) = %v, want %v", name, got, want)
		}
	}
	names := map[string]string{
		// strip, then the renames in order (the second sees the first's result), then prefix.
		"model.blocks.1.attn1.weight": "unet.first.attn1.weight",
		"model.blocks.2.attn1.weight": "unet.b2.attn1.weight",
		"other.model.blocks.3.attn":   "unet.other.model.blocks.3.attn", // strip_prefix only at the start
		"norm":                        "unet.norm",
	}
	for in, want := range names {
		if got, err := s.OutputName(in); err != nil || got != want {
			t.Errorf("OutputName(%q) = %q, want %q", in, got, want)
		}
	}
}

// doublingRecipe is issue 14's item 9: thirteen renames that each insert
// "ab" at every position, tripling the name each time (298 bytes that took
// 20 s and 363 MB).
var doublingRecipe = `{"sources": [{"path": "tiny-sd1.safetensors", "include": [".*"], "rename": [` +
	strings.TrimSuffix(strings.Repeat(`["", "ab"], `, 13), ", ") + `]}]}`

// TestRenameGrowthBounded: renames that grow names exponentially stop at
// MaxOutputName with an error naming the tensor and the rename.
func TestRenameGrowthBounded(t *testing.T) {
	r, err := ParseRecipe("grow.json", []byte(doublingRecipe))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = r.Sources[0].OutputName("model.diffusion_model.input_blocks.1.0.weight")
	if err == nil || !strings.Contains(err.Error(), "rename[") || !strings.Contains(err.Error(), "longer than 4096 bytes") {
		t.Errorf("error %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
	if _, err := ParseRecipe("many.json", []byte(`{"sources": [{"path": "a", "include": ["x"], "rename": [`+
		strings.TrimSuffix(strings.Repeat(`["a", "b"], `, 300), ", ")+`]}]}`)); err == nil || !strings.Contains(err.Error(), "more than 256 renames") {
		t.Errorf("300 renames: %v", err)
	}
}

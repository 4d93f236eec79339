package merge

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
)

// graftFixture writes the three files of the issue's example: a BF16 body,
// an INT8 convrot file with the modulation layers, and a component file.
func graftFixture(t *testing.T) string {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "body.safetensors"), map[string]string{"format": "pt"},
		testTensor{"blocks.0.attn.weight", formats.BF16, []int64{4, 8}, bytesOf(64, 1)},
		testTensor{"blocks.0.adaln_proj.linear.weight", formats.BF16, []int64{4, 8}, bytesOf(64, 2)},
		testTensor{"time_embedder.weight", formats.BF16, []int64{8}, bytesOf(16, 3)},
		testTensor{"adaln_t_table", formats.BF16, []int64{2, 8}, bytesOf(32, 4)},
		testTensor{"final.bias", formats.BF16, []int64{8}, bytesOf(16, 5)},
	)
	write(t, filepath.Join(dir, "int8.safetensors"), nil,
		testTensor{"blocks.0.attn.weight", formats.I8, []int64{4, 8}, bytesOf(32, 6)},
		testTensor{"blocks.0.adaln_proj.linear.weight", formats.I8, []int64{4, 8}, bytesOf(32, 7)},
		testTensor{"blocks.0.adaln_proj.linear.weight_scale", formats.F32, []int64{4, 1}, bytesOf(16, 8)},
		testTensor{"blocks.0.adaln_proj.linear.comfy_quant", formats.U8, []int64{5}, []byte(`{"a":`)},
		testTensor{"adaln_t_table", formats.F32, []int64{2, 8}, bytesOf(64, 9)},
	)
	write(t, filepath.Join(dir, "qf.safetensors"), nil,
		testTensor{"layers.0.weight", formats.F16, []int64{2, 4}, bytesOf(16, 10)},
		testTensor{"layers.0.bias", formats.F16, []int64{2}, bytesOf(4, 11)},
	)
	return dir
}

const issueRecipe = `{
  "sources": [
    {"path": "body.safetensors", "include": [".*"], "exclude": ["adaln_proj\\.linear", "^time_embedder", "adaln_t_table"]},
    {"path": "int8.safetensors", "include": ["adaln_proj\\.linear", "adaln_t_table"]},
    {"path": "qf.safetensors", "include": [".*"], "prefix": "queryformer."}
  ],
  "metadata": {"source": "graft test"}
}`

// The issue's example: the selection, the order, the exact bytes and the metadata.
func TestRecipeIssueExample(t *testing.T) {
	dir := graftFixture(t)
	r := recipeFile(t, dir, issueRecipe)
	out := filepath.Join(dir, "out.safetensors")
	p, err := PlanRecipe(r, out, "")
	if err != nil {
		t.Fatal(err)
	}
	runPlan(t, p, 2, 0)
	got, names, m := readAll(t, out)
	want := []struct{ name, file, src string }{
		{"blocks.0.attn.weight", "body", "blocks.0.attn.weight"},
		{"final.bias", "body", "final.bias"},
		{"blocks.0.adaln_proj.linear.weight", "int8", "blocks.0.adaln_proj.linear.weight"},
		{"blocks.0.adaln_proj.linear.weight_scale", "int8", "blocks.0.adaln_proj.linear.weight_scale"},
		{"blocks.0.adaln_proj.linear.comfy_quant", "int8", "blocks.0.adaln_proj.linear.comfy_quant"},
		{"adaln_t_table", "int8", "adaln_t_table"},
		{"queryformer.layers.0.weight", "qf", "layers.0.weight"},
		{"queryformer.layers.0.bias", "qf", "layers.0.bias"},
	}
	var wantNames []string
	for _, w := range want {
		wantNames = append(wantNames, w.name)
		src, _, _ := readAll(t, filepath.Join(dir, w.file+".safetensors"))
		s, g := src[w.src], got[w.name]
		if !bytes.Equal(s.data, g.data) || s.typ != g.typ || !reflect.DeepEqual(s.shape, g.shape) {
			t.Errorf("%s: got %s %v %x, want %s %v %x from %s", w.name, g.typ, g.shape, g.data, s.typ, s.shape, s.data, w.file)
		}
	}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("output tensors %q, want %q", names, wantNames)
	}
	if v, _ := m.Metadata().String("source"); v != "graft test" || len(m.Metadata()) != 1 {
		t.Errorf("metadata = %v", m.Metadata())
	}
}

func TestRecipeDryRunListsSources(t *testing.T) {
	dir := graftFixture(t)
	r := recipeFile(t, dir, issueRecipe)
	out := filepath.Join(dir, "out.gguf")
	p, err := PlanRecipe(withoutU8(r), out, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var b bytes.Buffer
	if err := p.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{
		"queryformer.layers.0.weight", filepath.Join(dir, "qf.safetensors") + ":layers.0.weight",
		"SOURCE", out + ": file ", "bytes); 7 tensors",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("dry run lacks %q:\n%s", want, s)
		}
	}
	found := false
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) == 9 && f[0] == "adaln_t_table" {
			found = true
			if f[1] != "f32" || f[2] != "f32" || !strings.HasSuffix(f[7], "int8.safetensors:adaln_t_table") || f[8] != "copy" {
				t.Errorf("adaln_t_table row: %q", f)
			}
		}
	}
	if !found {
		t.Errorf("no adaln_t_table row:\n%s", s)
	}
	noOutput(t, out)
}

// withoutU8 excludes the comfy_quant marker (no ggml type) for GGUF outputs.
func withoutU8(r *Recipe) *Recipe {
	r2, err := ParseRecipe(r.File, []byte(strings.Replace(issueRecipe, `"include": ["adaln_proj\\.linear", "adaln_t_table"]`,
		`"include": ["adaln_proj\\.linear", "adaln_t_table"], "exclude": ["comfy_quant"]`, 1)))
	if err != nil {
		panic(err)
	}
	return r2
}

func TestRecipeRenameStripPrefixAndGGUF(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.gguf"), nil,
		testTensor{"model.diffusion_model.in.0.weight", formats.F16, []int64{2, 4}, bytesOf(16, 1)},
		testTensor{"model.diffusion_model.out.weight", formats.F32, []int64{4}, bytesOf(16, 2)},
		testTensor{"vae.x", formats.F32, []int64{1}, bytesOf(4, 3)},
	)
	r := recipeFile(t, dir, `{"sources": [
		{"path": "a.gguf", "include": ["^model\\.diffusion_model\\."], "strip_prefix": "model.diffusion_model.",
		 "rename": [["^in\\.(\\d+)\\.", "input_blocks.$1."]], "prefix": "unet."},
		{"path": "a.gguf", "include": ["vae"], "strip_prefix": "nothing."}]}`)
	out := filepath.Join(dir, "o.gguf")
	p, err := PlanRecipe(r, out, "")
	if err != nil {
		t.Fatal(err)
	}
	runPlan(t, p, 1, 0)
	got, names, _ := readAll(t, out)
	if want := []string{"unet.input_blocks.0.weight", "unet.out.weight", "vae.x"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("names %q, want %q", names, want)
	}
	if !bytes.Equal(got["unet.input_blocks.0.weight"].data, bytesOf(16, 1)) || !bytes.Equal(got["vae.x"].data, bytesOf(4, 3)) {
		t.Error("bytes changed")
	}
}

// Conflicts are judged on output names and name the tensor and both files.
func TestRecipeConflicts(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.safetensors"), nil, tF32("x.w", []int64{1}, []float32{1}), tF32("w", []int64{1}, []float32{2}))
	write(t, filepath.Join(dir, "b.safetensors"), nil, tF32("y.w", []int64{1}, []float32{3}))
	a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	cases := []struct {
		js   string
		want []string
	}{
		// Different source names, the same output name after strip_prefix.
		{`{"sources": [{"path": "a.safetensors", "include": ["^x\\."], "strip_prefix": "x."}, {"path": "a.safetensors", "include": ["^w$"]}]}`,
			[]string{`output tensor "w" is selected twice`, a + ` (as "x.w")`, "sources[1] " + a}},
		// After rename, across files.
		{`{"sources": [{"path": "a.safetensors", "include": ["^x"]}, {"path": "b.safetensors", "include": [".*"], "rename": [["^y", "x"]]}]}`,
			[]string{`output tensor "x.w"`, "sources[0] " + a, b + ` (as "y.w")`}},
		// After prefix.
		{`{"sources": [{"path": "a.safetensors", "include": ["^x"]}, {"path": "a.safetensors", "include": ["^w"], "prefix": "x."}]}`,
			[]string{`output tensor "x.w"`}},
		// The same tensor taken twice.
		{`{"sources": [{"path": "b.safetensors", "include": ["w"]}, {"path": "b.safetensors", "include": ["y"]}]}`,
			[]string{`output tensor "y.w" is selected twice`, "sources[0] " + b, "sources[1] " + b}},
	}
	for _, c := range cases {
		r := recipeFile(t, dir, c.js)
		out := filepath.Join(dir, "o.safetensors")
		_, err := PlanRecipe(r, out, "")
		wantErr(t, err, c.want...)
		noOutput(t, out)
	}
}

// Patterns see the source's own names, never the output names; a source
// that selects nothing is an error naming it.
func TestRecipeSelectsNothing(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.safetensors"), nil, tF32("w", []int64{1}, []float32{1}))
	for _, js := range []string{
		`{"sources": [{"path": "a.safetensors", "include": ["^p\\.w"], "prefix": "p."}]}`,
		`{"sources": [{"path": "a.safetensors", "include": ["w"], "exclude": ["."]}]}`,
	} {
		r := recipeFile(t, dir, js)
		_, err := PlanRecipe(r, filepath.Join(dir, "o.safetensors"), "")
		wantErr(t, err, "recipe.json: sources[0] ("+filepath.Join(dir, "a.safetensors")+") selects no tensor")
	}
	r := recipeFile(t, dir, `{"sources": [{"path": "missing.safetensors", "include": ["w"]}]}`)
	_, err := PlanRecipe(r, filepath.Join(dir, "o.safetensors"), "")
	wantErr(t, err, "sources[0]", "missing.safetensors")
}

// ggml-quantized tensors: copied into GGUF byte for byte, refused for
// safetensors unless --dtype decodes them (to the codec's values).
func TestRecipeQuantizedGGUF(t *testing.T) {
	dir := t.TempDir()
	vals := ramp(64, 3)
	q := make([]byte, 68)
	enc, err := quant.Encoder(formats.Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	enc.Quantize(q, vals, nil)
	write(t, filepath.Join(dir, "q.gguf"), nil,
		testTensor{"blk.weight", formats.Q8_0, []int64{1, 64}, q},
		tF32("blk.norm", []int64{2}, []float32{1, 2}))
	r := recipeFile(t, dir, `{"sources": [{"path": "q.gguf", "include": ["."]}]}`)

	out := filepath.Join(dir, "o.safetensors")
	_, err = PlanRecipe(r, out, "")
	wantErr(t, err, "o.safetensors: 1 ggml-quantized tensors cannot be copied into safetensors", `"blk.weight" (q8_0`, "DType")
	noOutput(t, out)

	p, err := PlanRecipe(r, out, "f16")
	if err != nil {
		t.Fatal(err)
	}
	runPlan(t, p, 1, 0)
	got, _, _ := readAll(t, out)
	dec := make([]float32, 64)
	c, _ := quant.Decoder(formats.Q8_0)
	c.Dequantize(dec, q)
	wantF16 := make([]byte, 128)
	quant.F32ToF16Row(wantF16, dec)
	if g := got["blk.weight"]; g.typ != formats.F16 || !bytes.Equal(g.data, wantF16) {
		t.Errorf("dequantized tensor: %s, bytes differ", g.typ)
	}
	if g := got["blk.norm"]; g.typ != formats.F32 || !bytes.Equal(g.data, f32(1, 2)) {
		t.Errorf("unquantized tensor changed: %s %v", g.typ, floats(g.data))
	}

	gout := filepath.Join(dir, "o.gguf")
	p, err = PlanRecipe(r, gout, "")
	if err != nil {
		t.Fatal(err)
	}
	runPlan(t, p, 1, 0)
	got, _, _ = readAll(t, gout)
	if g := got["blk.weight"]; g.typ != formats.Q8_0 || !bytes.Equal(g.data, q) {
		t.Errorf("q8_0 copy into GGUF changed: %s", g.typ)
	}
	if _, err := PlanRecipe(r, gout, "q4_0"); err == nil {
		t.Error("--dtype q4_0 accepted for a recipe")
	}
}

// Dtypes with no ggml type are refused up front for GGUF, naming the tensors.
func TestRecipeNoGGMLType(t *testing.T) {
	dir := graftFixture(t)
	write(t, filepath.Join(dir, "fp8.safetensors"), nil,
		testTensor{"f8.weight", formats.F8_E4M3, []int64{2, 2}, bytesOf(4, 1)},
		testTensor{"mask", formats.Bool, []int64{2}, []byte{0, 1}})
	r := recipeFile(t, dir, strings.Replace(issueRecipe, `"sources": [`, `"sources": [{"path": "fp8.safetensors", "include": ["."]},`, 1))
	out := filepath.Join(dir, "o.gguf")
	_, err := PlanRecipe(r, out, "f16")
	wantErr(t, err, "o.gguf: 3 tensors have types with no ggml type", `"f8.weight" (f8_e4m3`, `"mask" (bool`, `"blocks.0.adaln_proj.linear.comfy_quant" (u8`)
	noOutput(t, out)
}

func TestRecipeOutputChecks(t *testing.T) {
	dir := graftFixture(t)
	r := recipeFile(t, dir, issueRecipe)
	if _, err := PlanRecipe(r, filepath.Join(dir, "o.bin"), ""); err == nil || !strings.Contains(err.Error(), ".safetensors or .gguf") {
		t.Errorf("unknown extension: %v", err)
	}
	// The output may not be a source, even with --force.
	body := filepath.Join(dir, "body.safetensors")
	before, _ := os.ReadFile(body)
	p, err := PlanRecipe(r, body, "")
	if err != nil {
		t.Fatal(err)
	}
	err = pipeline.Run(context.Background(), p, pipeline.Options{Force: true})
	p.Close()
	if !errors.Is(err, pipeline.ErrOutputIsInput) {
		t.Errorf("output = input: %v", err)
	}
	if after, _ := os.ReadFile(body); !bytes.Equal(before, after) {
		t.Error("the input was modified")
	}
	// An existing output needs --force.
	out := filepath.Join(dir, "o.safetensors")
	os.WriteFile(out, []byte("old"), 0o644)
	p, _ = PlanRecipe(r, out, "")
	err = pipeline.Run(context.Background(), p, pipeline.Options{})
	if !errors.Is(err, pipeline.ErrExists) {
		t.Errorf("existing output: %v", err)
	}
	if err := pipeline.Run(context.Background(), p, pipeline.Options{Force: true}); err != nil {
		t.Errorf("--force: %v", err)
	}
	p.Close()
}

// An interrupted run leaves neither the output nor its .partial file.
func TestRecipeInterrupted(t *testing.T) {
	dir := t.TempDir()
	var ts []testTensor
	for i := range 64 {
		ts = append(ts, testTensor{name: "t" + string(rune('A'+i%26)) + string(rune('a'+i/26)), typ: formats.F32, shape: []int64{64, 256}, data: bytesOf(64*256*4, byte(i))})
	}
	write(t, filepath.Join(dir, "big.safetensors"), nil, ts...)
	r := recipeFile(t, dir, `{"sources": [{"path": "big.safetensors", "include": ["."]}]}`)
	out := filepath.Join(dir, "o.safetensors")
	p, err := PlanRecipe(r, out, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	err = pipeline.Run(ctx, p, pipeline.Options{Threads: 1, ChunkBytes: 64 << 10, Progress: func(done, total int64) {
		if done > 0 && done < total {
			cancel()
		}
	}})
	if !errors.Is(err, pipeline.ErrInterrupted) {
		t.Fatalf("err = %v, want an interruption", err)
	}
	noOutput(t, out)
}

// Sharded safetensors inputs are read through their index.
func TestRecipeShardedInput(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m-00001-of-00002.safetensors"), nil, tF32("a", []int64{2}, []float32{1, 2}))
	write(t, filepath.Join(dir, "m-00002-of-00002.safetensors"), nil, tF32("b", []int64{2}, []float32{3, 4}))
	idx := `{"metadata": {}, "weight_map": {"a": "m-00001-of-00002.safetensors", "b": "m-00002-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(dir, "m.safetensors.index.json"), []byte(idx), 0o644)
	r := recipeFile(t, dir, `{"sources": [{"path": "m.safetensors.index.json", "include": ["."], "prefix": "s."}]}`)
	out := filepath.Join(dir, "o.safetensors")
	p, err := PlanRecipe(r, out, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Inputs) < 2 {
		t.Errorf("inputs %q: the shards must be listed", p.Inputs)
	}
	runPlan(t, p, 1, 0)
	got, names, _ := readAll(t, out)
	if !reflect.DeepEqual(names, []string{"s.a", "s.b"}) || !bytes.Equal(got["s.b"].data, f32(3, 4)) {
		t.Errorf("sharded: %q", names)
	}
}

// A read error during the run (an input truncated after planning) removes
// the partial output.
func TestRecipeReadErrorLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	src := write(t, filepath.Join(dir, "a.safetensors"), nil, tF32("w", []int64{1024}, ramp(1024, 1)))
	r := recipeFile(t, dir, `{"sources": [{"path": "a.safetensors", "include": ["."]}]}`)
	out := filepath.Join(dir, "o.safetensors")
	p, err := PlanRecipe(r, out, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st, _ := os.Stat(src)
	if err := os.Truncate(src, st.Size()-100); err != nil {
		t.Fatal(err)
	}
	err = pipeline.Run(context.Background(), p, pipeline.Options{Threads: 1})
	wantErr(t, err, "o.safetensors", `tensor "w"`)
	noOutput(t, out)
}

package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/tensor"
)

const (
	tinyTuned = "../../testdata/tiny-sd1-tuned.safetensors"
	tinyLoRA  = "../../testdata/tiny-sd1-lora.safetensors"
	tinySDXL  = "../../testdata/tiny-sdxl.gguf"
)

// mustRun runs sdtool and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	code, o, e := runApp(t, args...)
	if code != 0 {
		t.Fatalf("sdtool %s: exit %d: %s", strings.Join(args, " "), code, e)
	}
	return o, e
}

// writeSeed writes the tiny SD1 model with another seed (a "fine-tune"
// whose every weight differs from testdata's).
func writeSeed(t *testing.T, path string, seed int64) {
	t.Helper()
	s := synth.TinySD
	s.Seed = seed
	if err := s.Write(path); err != nil {
		t.Fatal(err)
	}
}

// TestTinyLoRAFixtures regenerates testdata/tiny-sd1-tuned.safetensors (the
// tiny model's cross-attention key weights moved a tenth of the way to
// another seed's) and testdata/tiny-sd1-lora.safetensors (their rank-2
// LoRA by lora extract) and compares them with the committed files byte
// for byte. SDTOOL_UPDATE_TESTDATA=1 rewrites them.
func TestTinyLoRAFixtures(t *testing.T) {
	dir := t.TempDir()
	s2 := filepath.Join(dir, "seed2.safetensors")
	writeSeed(t, s2, 2)
	ws := filepath.Join(dir, "ws.safetensors")
	mustRun(t, "merge", "--method", "weighted_sum", "-a", tiny, "-b", s2, "--alpha", "0.1", "-o", ws)
	recipe := filepath.Join(dir, "r.json")
	os.WriteFile(recipe, []byte(`{"sources": [{"path": "ws.safetensors", "include": ["attn2\\.to_k\\.weight$"]}],
  "metadata": {"modelspec.title": "tiny sd1 with its cross-attention keys tuned"}}`), 0o644)
	tuned := filepath.Join(dir, "tiny-sd1-tuned.safetensors")
	mustRun(t, "merge", "--recipe", recipe, "-o", tuned)
	adapter := filepath.Join(dir, "tiny-sd1-lora.safetensors")
	mustRun(t, "lora", "extract", "--base", tiny, "--tuned", tuned, "--rank", "2", "-o", adapter)
	for _, f := range [][2]string{{tuned, tinyTuned}, {adapter, tinyLoRA}} {
		got, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if os.Getenv("SDTOOL_UPDATE_TESTDATA") == "1" {
			if err := os.WriteFile(f[1], got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(f[1])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("regenerated %s (%d bytes) differs from the committed file (%d bytes); SDTOOL_UPDATE_TESTDATA=1 rewrites it", filepath.Base(f[1]), len(got), len(want))
		}
		if len(want) > 128<<10 {
			t.Errorf("%s is %d bytes: keep fixtures small", f[1], len(want))
		}
	}
}

// readAll decodes every float tensor of a model (through package tensor,
// so any type) by name.
func readAll(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	m, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, err := tensor.NewView(m)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	var s tensor.Scratch
	for _, src := range v.Sources {
		if !src.Float() {
			continue
		}
		f := make([]float32, src.Elements())
		if err := src.Read(f, 0, &s); err != nil {
			t.Fatal(err)
		}
		out[src.Name] = f
	}
	return out
}

func sqDist(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return s
}

// extractJSON is the part of lora extract's --json report the tests read.
type extractJSON struct {
	Layers []struct {
		Module  string   `json:"module"`
		Tensors []string `json:"tensors"`
		Status  string   `json:"status"`
		Rank    int      `json:"rank"`
		Kept    float64  `json:"kept"`
		Norm    float64  `json:"norm"`
		SDCpp   bool     `json:"sdcpp"`
	} `json:"layers"`
	Totals struct {
		Layers, Extracted, Unchanged int
		Kept                         float64
		Bytes                        int64
	} `json:"totals"`
}

// TestExtractThenBakeReproducesTuned is the round trip through the
// commands on the tiny model and another seed of it: an extraction at full
// rank baked into A gives B to float precision; at rank 2 the baked
// layers miss B by exactly the share of the difference the report says
// was not kept (the SVD's tail), and the other tensors stay A's.
func TestExtractThenBakeReproducesTuned(t *testing.T) {
	dir := t.TempDir()
	tuned := filepath.Join(dir, "b.safetensors")
	writeSeed(t, tuned, 3)
	a, b := readAll(t, tiny), readAll(t, tuned)
	for _, rank := range []string{"512", "2"} {
		adapter := filepath.Join(dir, "r"+rank+".safetensors")
		out, _ := mustRun(t, "lora", "extract", "--base", tiny, "--tuned", tuned, "--rank", rank, "--type", "f32", "-o", adapter, "--json")
		var rep extractJSON
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("--json: %v\n%s", err, out)
		}
		if rep.Totals.Extracted < 200 || rep.Totals.Extracted != len(rep.Layers) {
			t.Fatalf("rank %s: %d of %d layers extracted", rank, rep.Totals.Extracted, len(rep.Layers))
		}
		baked := filepath.Join(dir, "baked"+rank+".safetensors")
		mustRun(t, "merge", "--base", tiny, "--lora", adapter, "-o", baked, "--type", "f32")
		got := readAll(t, baked)
		changed := map[string]bool{}
		for _, l := range rep.Layers {
			if len(l.Tensors) != 1 {
				t.Fatalf("%s: %d tensors (SD1 has no fused layers)", l.Module, len(l.Tensors))
			}
			name := l.Tensors[0]
			changed[name] = true
			d2 := sqDist(b[name], a[name])
			if math.Abs(math.Sqrt(d2)-l.Norm) > 1e-5*l.Norm {
				t.Errorf("%s: reported norm %v, ‖B−A‖ = %v", l.Module, l.Norm, math.Sqrt(d2))
			}
			miss := sqDist(got[name], b[name]) / d2
			if rank == "512" {
				if miss > 1e-9 || l.Kept < 1-1e-6 {
					t.Errorf("%s: full rank misses %.3g of ‖B−A‖² (kept %v)", name, miss, l.Kept)
				}
				continue
			}
			if math.Abs(miss-(1-l.Kept)) > 1e-4 {
				t.Errorf("%s: baked misses %.6f of ‖B−A‖², the report kept %.6f", name, miss, l.Kept)
			}
		}
		for name, v := range got {
			if !changed[name] && sqDist(v, a[name]) != 0 {
				t.Errorf("rank %s: %s changed although no layer adapts it", rank, name)
			}
		}
	}
}

// TestBakeQuantizesInTheSamePass checks that baking with a quantized type
// writes, for every changed tensor, the bytes that quantizing the baked
// model (baked in f32 first) gives: with a mix and an importance matrix,
// so quantize's planner and its weights are the ones used.
func TestBakeQuantizesInTheSamePass(t *testing.T) {
	dir := t.TempDir()
	f32 := filepath.Join(dir, "baked-f32.safetensors")
	mustRun(t, "merge", "--base", tiny, "--lora", tinyLoRA+":0.7", "-o", f32, "--type", "f32")
	imat := "../../testdata/tiny-sd1.imatrix.dat"
	for _, typ := range []string{"q8_0", "Q4_K_M"} {
		direct := filepath.Join(dir, "direct-"+typ+".gguf")
		mustRun(t, "merge", "--base", tiny, "--lora", tinyLoRA+":0.7", "-o", direct, "--type", typ, "--imatrix", imat)
		twoStep := filepath.Join(dir, "two-"+typ+".gguf")
		mustRun(t, "quantize", f32, "-o", twoStep, "--type", typ, "--imatrix", imat)
		dm, err := formats.Open(direct)
		if err != nil {
			t.Fatal(err)
		}
		tm, err := formats.Open(twoStep)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, dt := range dm.Tensors() {
			if !strings.Contains(dt.Name, "attn2.to_k.") {
				continue
			}
			tt, ok := formats.Find(tm, dt.Name)
			if !ok || tt.Type != dt.Type {
				t.Errorf("%s %s: %s in the bake, %s by quantize", typ, dt.Name, dt.Type, tt.Type)
				continue
			}
			x, _ := formats.ReadTensor(dm, &dt)
			y, _ := formats.ReadTensor(tm, &tt)
			if !bytes.Equal(x, y) {
				t.Errorf("%s %s: the bake's bytes differ from quantizing the baked model", typ, dt.Name)
			}
			n++
		}
		if n != 16 {
			t.Errorf("%s: compared %d changed tensors, want 16", typ, n)
		}
		if kv, ok := dm.Metadata().Get("sdtool.merge"); !ok || !strings.Contains(kv.Value.(string), "lora=tiny-sd1-lora.safetensors:0.7") {
			t.Errorf("%s: sdtool.merge = %v", typ, kv.Value)
		}
		dm.Close()
		tm.Close()
	}
}

// TestMergeLoRAErrors checks what a bake refuses, each on one line and
// without writing.
func TestMergeLoRAErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "o.safetensors")
	// An adapter with a module the tiny model does not have, and one whose
	// rows do not fit the tensor its name matches.
	bad := filepath.Join(dir, "bad.safetensors")
	writeTensors(t, bad, map[string][]int64{
		"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight":   {32, 2},
		"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": {2, 32},
		"lora_unet_no_such_block_0_proj.lora_up.weight":                 {32, 2},
		"lora_unet_no_such_block_0_proj.lora_down.weight":               {2, 32},
	})
	misfit := filepath.Join(dir, "misfit.safetensors")
	writeTensors(t, misfit, map[string][]int64{
		"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight":   {33, 2},
		"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": {2, 32},
	})
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"merge", "--lora", tinyLoRA, "-o", out}, "--lora needs --base MODEL"},
		{[]string{"merge", "--base", tiny, "-o", out}, "needs at least one --lora"},
		{[]string{"merge", "--base", tiny, "--lora", tinyLoRA, "--method", "ties", "-o", out}, "excludes --recipe and --method"},
		{[]string{"merge", "--base", tiny, "--lora", tinyLoRA, "-a", tiny, "-o", out}, "-a is for arithmetic merges"},
		{[]string{"merge", "--method", "ties", "-a", tiny, "-b", tiny, "--allow-unmatched", "-o", out}, "--allow-unmatched is for LoRA bakes"},
		{[]string{"merge", "--base", tiny, "--lora", tinyLoRA + ":x1", "-o", out}, "x1"},
		{[]string{"merge", "--base", tiny, "--lora", tiny, "-o", out}, "not an adapter"},
		{[]string{"merge", "--base", tiny, "--lora", bad, "-o", out}, "lora_unet_no_such_block_0_proj"},
		{[]string{"merge", "--base", tiny, "--lora", misfit, "-o", out}, `"model.diffusion_model.input_blocks.1.1.proj_in.weight" [32 32 1 1]`},
		{[]string{"merge", "--base", tiny, "--lora", tinyLoRA, "-o", out, "--imatrix", "../../testdata/tiny-sd1.imatrix.dat"}, "--imatrix applies with a --type that quantizes"},
		{[]string{"merge", "--base", tiny, "--lora", tinyLoRA, "-o", out, "--type", "q4_K"}, "must end in .gguf"},
		{[]string{"merge", "--base", tiny, "--lora", tinyLoRA, "-o", tinyLoRA, "--force"}, "input"},
	}
	for _, c := range cases {
		code, _, errOut := runApp(t, c.args...)
		if code != 1 || !strings.HasPrefix(errOut, "sdtool: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stderr %q, want one line with %q", c.args, code, errOut, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%q: wrote %s", c.args, out)
		}
	}
	// --allow-unmatched bakes what matches and says what did not.
	code, _, errOut := runApp(t, "merge", "--base", tiny, "--lora", bad, "-o", out, "--allow-unmatched")
	if code != 0 || !strings.Contains(errOut, "lora_unet_no_such_block_0_proj") {
		t.Errorf("--allow-unmatched: exit %d: %s", code, errOut)
	}
}

// writeTensors writes an F32 safetensors file of small nonzero tensors.
func writeTensors(t *testing.T, path string, shapes map[string][]int64) {
	t.Helper()
	var list []formats.Tensor
	for name, shape := range shapes {
		n, _ := formats.Elements(shape)
		list = append(list, formats.Tensor{Name: name, Type: formats.F32, Shape: shape, Size: 4 * n})
	}
	c, err := formats.CreatorFor(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := c.New(&buf, list, formats.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range list {
		b := make([]byte, tt.Size)
		for i := 0; i < len(b); i += 4 {
			b[i+3] = 0x3c // 2^-7
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBakeDryRunAndDiff checks that --dry-run lists every changed tensor
// with its adapter and writes nothing, and that diff of the baked model
// against its base finds exactly the changed tensors.
func TestBakeDryRunAndDiff(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "baked.safetensors")
	stdout, _ := mustRun(t, "merge", "--base", tiny, "--lora", tinyLoRA, "--lora", tinyLoRA+":-0.25", "-o", out, "--dry-run")
	if !strings.Contains(stdout, "tiny-sd1-lora.safetensors (strength -0.25): 16 layers change 16 tensors") ||
		!strings.Contains(stdout, "+ tiny-sd1-lora.safetensors lora r2 + tiny-sd1-lora.safetensors lora r2") {
		t.Errorf("dry run does not list the changes:\n%s", stdout)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("--dry-run wrote the output")
	}
	mustRun(t, "merge", "--base", tiny, "--lora", tinyLoRA, "-o", out)
	js, _ := mustRun(t, "diff", tiny, out, "--json")
	var rep struct {
		Tensors []struct {
			Name     string   `json:"name"`
			RelError *float64 `json:"rel_error"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("diff --json: %v", err)
	}
	kv := regexp.MustCompile(`attn2\.to_k\.weight$`)
	changed := 0
	for _, d := range rep.Tensors {
		if d.RelError == nil {
			continue
		}
		if *d.RelError > 0 {
			changed++
			if !kv.MatchString(d.Name) {
				t.Errorf("diff: %s changed (rel error %v), no layer adapts it", d.Name, *d.RelError)
			}
		} else if kv.MatchString(d.Name) {
			t.Errorf("diff: %s did not change", d.Name)
		}
	}
	if changed != 16 {
		t.Errorf("diff finds %d changed tensors, want 16", changed)
	}
}

// TestExtractJSONDocumented checks that every field of lora extract's
// --json report (a real run and a dry run) is documented.
func TestExtractJSONDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/lora-extract-json.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "| `") {
			rows = append(rows, l[:strings.Index(l[1:], "|")+1])
		}
	}
	dir := t.TempDir()
	for _, extra := range [][]string{{"--rank", "2"}, {"--energy", "0.5", "--dry-run"}} {
		args := append([]string{"lora", "extract", "--base", tiny, "--tuned", tinyTuned, "-o", filepath.Join(dir, "l.safetensors"), "--json", "--force"}, extra...)
		out, _ := mustRun(t, args...)
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: %v", extra, err)
		}
		keys := map[string]bool{}
		var walk func(any)
		walk = func(x any) {
			switch x := x.(type) {
			case map[string]any:
				for k, e := range x {
					keys[k] = true
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			}
		}
		walk(v)
		for k := range keys {
			found := false
			for _, r := range rows {
				found = found || strings.Contains(r, "`"+k+"`")
			}
			if !found {
				t.Errorf("%v: JSON field %q is not documented in docs/lora-extract-json.md", extra, k)
			}
		}
		if strings.Contains(out, "null") {
			t.Errorf("%v: the report holds null:\n%s", extra, out)
		}
	}
}

// TestBakeIntoQuantizedBase bakes into a q8_0 GGUF and a ComfyUI int8
// safetensors of the tiny model: every changed tensor is the base as
// dequantized plus the same delta as baked into the f16 model, every other
// tensor the dequantized base itself.
func TestBakeIntoQuantizedBase(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.safetensors")
	mustRun(t, "merge", "--base", tiny, "--lora", tinyLoRA, "-o", ref, "--type", "f32")
	a, r := readAll(t, tiny), readAll(t, ref)
	for _, c := range []struct{ file, typ string }{{"q8.gguf", "q8_0"}, {"i8.safetensors", "int8"}} {
		q := filepath.Join(dir, c.file)
		mustRun(t, "quantize", tiny, "-o", q, "--type", c.typ)
		out := filepath.Join(dir, "baked-"+c.typ+".safetensors")
		_, errOut := mustRun(t, "merge", "--base", q, "--lora", tinyLoRA, "-o", out, "--type", "f32")
		if !strings.Contains(errOut, "dequantized") {
			t.Errorf("%s: no warning that the base is dequantized: %s", c.typ, errOut)
		}
		qv, got := readAll(t, q), readAll(t, out)
		changed := 0
		for name, g := range got {
			base := qv[name]
			if len(base) != len(g) {
				t.Fatalf("%s %s: %d values, the base has %d", c.typ, name, len(g), len(base))
			}
			for i := range g {
				want := float64(base[i]) + float64(r[name][i]) - float64(a[name][i])
				if math.Abs(float64(g[i])-want) > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("%s %s[%d] = %v, want %v", c.typ, name, i, g[i], want)
				}
			}
			if sqDist(g, base) > 0 {
				changed++
			}
		}
		if changed != 16 {
			t.Errorf("%s: %d tensors changed, want 16", c.typ, changed)
		}
	}
}

// TestExtractSDCppOnly checks that --sdcpp-only leaves out exactly the
// layers stable-diffusion.cpp's loader cannot map, and says so.
func TestExtractSDCppOnly(t *testing.T) {
	dir := t.TempDir()
	tuned := filepath.Join(dir, "b.safetensors")
	writeSeed(t, tuned, 4)
	out := filepath.Join(dir, "l.safetensors")
	var all, only extractJSON
	js, _ := mustRun(t, "lora", "extract", "--base", tiny, "--tuned", tuned, "--rank", "2", "-o", out, "--dry-run", "--json")
	json.Unmarshal([]byte(js), &all)
	js, _ = mustRun(t, "lora", "extract", "--base", tiny, "--tuned", tuned, "--rank", "2", "-o", out, "--dry-run", "--json", "--sdcpp-only")
	var rep struct {
		Skipped []string `json:"skipped"`
	}
	json.Unmarshal([]byte(js), &only)
	json.Unmarshal([]byte(js), &rep)
	missing := 0
	for _, l := range all.Layers {
		if !l.SDCpp {
			missing++
		}
	}
	if missing == 0 || len(only.Layers) != len(all.Layers)-missing {
		t.Fatalf("%d layers, %d that sd.cpp cannot load; --sdcpp-only keeps %d", len(all.Layers), missing, len(only.Layers))
	}
	for _, l := range only.Layers {
		if !l.SDCpp {
			t.Errorf("--sdcpp-only keeps %s", l.Module)
		}
	}
	n := 0
	for _, s := range rep.Skipped {
		if strings.Contains(s, "--sdcpp-only") {
			n++
		}
	}
	if n != missing {
		t.Errorf("%d layers reported skipped for --sdcpp-only, want %d", n, missing)
	}
}

// TestBakeToComfyInt8 bakes into ComfyUI int8 safetensors in the same pass
// (quantize's ComfyUI types through the same planner): the output has
// comfy_quant layers, and its decoded changed weights are the f32 bake's to
// int8 precision.
func TestBakeToComfyInt8(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.safetensors")
	mustRun(t, "merge", "--base", tiny, "--lora", tinyLoRA, "-o", ref, "--type", "f32")
	out := filepath.Join(dir, "i8.safetensors")
	mustRun(t, "merge", "--base", tiny, "--lora", tinyLoRA, "-o", out, "--type", "int8")
	js, _ := mustRun(t, "inspect", "--json", "--no-tensors", out)
	var s struct {
		ComfyQuant []struct{ Module string } `json:"comfy_quant"`
	}
	if err := json.Unmarshal([]byte(js), &s); err != nil || len(s.ComfyQuant) < 100 {
		t.Fatalf("%d ComfyUI layers (%v)", len(s.ComfyQuant), err)
	}
	want, got := readAll(t, ref), readAll(t, out)
	for name, w := range want {
		if !strings.Contains(name, "attn2.to_k.") {
			continue
		}
		g := got[name]
		if rel := math.Sqrt(sqDist(g, w) / sqDist(w, make([]float32, len(w)))); rel > 0.02 {
			t.Errorf("%s: int8 bake is %.3f off the f32 bake", name, rel)
		}
	}
}

// TestBakeTakesQuantizeFlags checks that a bake passes quantize's output
// flags through: --metadata reaches the file, --convrot-group-size is
// checked as quantize checks it, and --strict refuses what a --target
// cannot load.
func TestBakeTakesQuantizeFlags(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "c.safetensors")
	mustRun(t, "merge", "--base", tiny, "--lora", tinyLoRA, "-o", out, "--type", "int8_convrot", "--convrot-group-size", "16", "--metadata", "modelspec.title=baked")
	js, _ := mustRun(t, "inspect", "--json", "--no-tensors", out)
	if !strings.Contains(js, `"modelspec.title"`) || !strings.Contains(js, `"baked"`) {
		t.Errorf("--metadata did not reach %s: %s", out, js)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--type", "int8_convrot", "--convrot-group-size", "15"}, "15"},
		{[]string{"--type", "int8_convrot", "--target", "ggml", "--strict"}, "ggml"},
	} {
		o := filepath.Join(dir, "x.safetensors")
		code, _, errOut := runApp(t, append([]string{"merge", "--base", tiny, "--lora", tinyLoRA, "-o", o}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stderr %q, want an error with %q", c.args, code, errOut, c.want)
		}
		if _, err := os.Stat(o); err == nil {
			t.Errorf("%q: wrote %s", c.args, o)
		}
	}
}
